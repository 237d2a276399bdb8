export const ControlMetrics = Symbol('ControlMetrics');
/** Control-plane counters the use cases report; the adapter exposes them (Prometheus). */
export interface ControlMetrics {
  vmCreated(): void;
  vmDeleted(): void;
  createFailed(): void;
  createDuration(seconds: number, outcome: 'ok' | 'error'): void;
  /** Called at scrape time, so the running gauge cannot drift from state. */
  setRunningSource(count: () => number): void;
}
