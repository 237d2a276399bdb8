import type { Clock } from '../ports/clock.js';
import type { ProcessMeter } from '../ports/process-meter.js';
import type { ConsoleLogs } from '../ports/stores.js';

/** A guest's process using less than this share of one CPU is idle (a booting guest uses all of one). */
const IDLE_SHARE = 0.1;
const SAMPLE_MS = 1000;

/** What a booting guest shows from the host at one moment: its console's size and its process's CPU time. */
export interface BootSample {
  at: number;
  console_bytes: number;
  cpu_ms: number;
}

/**
 * Tells a guest that hangs from one that boots slowly: a booting guest prints on its console or
 * keeps its CPU busy (under TCG, all of one). One that has done neither for `quietMs` waits for
 * something that will not come (a root disk that is not there, a shell on the console, a kernel
 * stuck with interrupts off but idle). Fed samples in time order; says why once it hangs.
 */
export class BootStallRule {
  private last?: BootSample;
  private activeAt = 0;

  constructor(private readonly quietMs: number) {}

  observe(s: BootSample): string | undefined {
    const prev = this.last;
    this.last = s;
    if (!prev) {
      this.activeAt = s.at;
      return undefined;
    }
    const busy = s.console_bytes !== prev.console_bytes || s.cpu_ms - prev.cpu_ms > (s.at - prev.at) * IDLE_SHARE;
    if (busy) this.activeAt = s.at;
    else if (s.at - this.activeAt >= this.quietMs)
      return (
        `the guest hangs: its console printed nothing and it used almost no CPU for ` +
        `${Math.round((s.at - this.activeAt) / 1000)} s (config boot_stall_timeout)`
      );
    return undefined;
  }
}

export interface BootStallWatch {
  /** Why the guest hangs, once it is seen to. */
  verdict(): string | undefined;
  stop(): void;
}

/**
 * Samples a cold-booting guest every second until `stop` or a verdict. A process that is gone
 * ends the watch: the crash watch says why.
 */
export function watchBootStall(
  deps: { consoles: ConsoleLogs; meter: ProcessMeter; clock: Clock },
  vm: string,
  pid: number,
  quietMs: number,
): BootStallWatch {
  const rule = new BootStallRule(quietMs);
  let verdict: string | undefined;
  let stopped = false;
  void (async () => {
    while (!stopped && verdict === undefined) {
      const [console_bytes, cpu_ms] = await Promise.all([deps.consoles.size(vm), deps.meter.cpuMs(pid)]);
      if (cpu_ms === undefined || stopped) return;
      verdict = rule.observe({ at: deps.clock.now(), console_bytes, cpu_ms });
      if (verdict === undefined) await deps.clock.sleep(SAMPLE_MS);
    }
  })().catch(() => undefined);
  return {
    verdict: () => verdict,
    stop: () => {
      stopped = true;
    },
  };
}
