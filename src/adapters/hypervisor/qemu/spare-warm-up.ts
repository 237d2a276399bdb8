import { basename } from 'node:path';
import type { GuestWarmUpCalls } from '../../../ports/clone-speed-ups.js';
import { cpuBounded } from '../../process-kit/proc-meter.js';
import { loadHeld } from './qemu-spawn.js';
import type { QmpClient } from './qmp-client.js';

/**
 * The most CPU time each step of a spare's warm-up may take (a minimal guest's whole warm-up takes
 * 0.6-1.8 s under TCG at full priority, a debian one's 2.1-3.9 s); a longer one stops the spare.
 */
const WARM_CPU_MS = 10_000;
/** The most time each step may take, whatever CPU it got (a guest that hangs idle spends none). */
const WARM_WALL_MS = 120_000;

/**
 * A warm-up step, bounded by the CPU time its QEMU spends on it (WARM_CPU_MS) and, loosely, by the
 * clock (WARM_WALL_MS). A spare runs niced: on a busy host it gets a small share of the CPU, and a
 * step that takes 2 s at full priority may take a minute there without anything being wrong with it.
 */
const bounded = <T>(p: Promise<T>, pid: number) => cpuBounded(p, pid, { cpuMs: WARM_CPU_MS, wallMs: WARM_WALL_MS });

/** What a warm-up reads of a spare, and what it says of it. */
export interface Warming {
  pid: number;
  qmp: QmpClient;
  agentPort: number;
  /** Its directory: its name is the spare's (`spare-<hex>`), which the warm-up's identity gives the guest. */
  dir: string;
  /** Set here: the first answer was given (true) or a step before it failed (false). */
  answered?: Promise<boolean>;
  /** Set here once the guest is restored: a clone only continues it. */
  loaded?: boolean;
  /** Set by a clone that took the spare: the warm-up then neither pauses it nor fails it. */
  taken?: boolean;
}

/**
 * Restores a spare's guest, runs it through `warm` (the calls a clone's first answer and first
 * command take) and pauses it. A clone may take it once the first answer is given (`answered`); the
 * rest then goes on beside the clone, and the guest is not paused. Resolves with the error of a
 * step that failed or outlasted its bound before a clone took it (the caller stops the spare), else
 * undefined.
 */
export async function warmSpare(s: Warming, warm: GuestWarmUpCalls): Promise<Error | undefined> {
  const ep = { host: '127.0.0.1', port: s.agentPort };
  let answered!: (ok: boolean) => void;
  s.answered = new Promise<boolean>((r) => (answered = r));
  try {
    const failed = await loadHeld(s.qmp);
    if (failed) throw failed;
    s.loaded = true;
    await bounded(warm.firstAnswer(ep, basename(s.dir)), s.pid);
  } catch (err) {
    answered(false);
    return err as Error;
  }
  answered(true);
  try {
    await bounded(warm.firstCommand(ep), s.pid);
    // Sent at once when no clone took it meanwhile: a clone's `cont` can only come after it.
    if (!s.taken) await s.qmp.execute('stop');
  } catch (err) {
    if (!s.taken) return err as Error;
  }
  return undefined;
}
