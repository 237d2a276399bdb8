export const ControlMetrics = Symbol('ControlMetrics');
/** Control-plane counters the use cases report; the adapter exposes them (Prometheus). */
export interface ControlMetrics {
  vmCreated(): void;
  vmDeleted(): void;
  createFailed(): void;
  createDuration(seconds: number, outcome: 'ok' | 'error'): void;
  /** A guest's connection or flow (or, `dns`, a name it asked for) was let out or refused; `repeats` more folded into it. */
  egressDecision(vm: string, decision: 'allow' | 'deny', repeats: number, dns: boolean): void;
  /** The VM is gone: its series go too. */
  forgetVm(vm: string): void;
  /** Called at scrape time, so the running gauge cannot drift from state. */
  setRunningSource(count: () => number): void;
}
