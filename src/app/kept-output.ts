import { inject, injectable } from 'inversify';
import { errorMessage } from '../domain/errors.js';
import { keptOutputOf, type KeptOutput } from '../domain/timeline.js';
import type { VmRecord } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import { GuestProcesses } from '../ports/guest-processes.js';
import { Logger } from '../ports/logger.js';
import { beforeDeadline } from './deadline.js';
import { GuestProxy } from './guest-proxy.js';

/** How long a running guest is given to list what it keeps before its state is saved. */
const LIST_MS = 5000;

/**
 * The same before a pause, which is quick otherwise: an agent that does not answer holds a pause
 * up this long at most, and the paused VM's snapshots then note nothing.
 */
export const PAUSE_LIST_MS = 2000;

/**
 * What a running guest's processes and watches have written, asked just before its state is saved
 * (a snapshot, a suspend) or it is paused (a paused guest cannot be asked, and its snapshots and a
 * suspend take what was noted then): below these bytes a guest brought back from that state wrote
 * what this one did (domain/timeline.ts). None when the guest does not answer in time: its readers
 * then read again from 0 after a revert, and are told.
 */
@injectable()
export class KeptOutputs {
  constructor(
    @inject(GuestProcesses) private readonly processes: GuestProcesses,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
  ) {}

  async note(rec: VmRecord, ms = LIST_MS): Promise<KeptOutput | undefined> {
    try {
      const ep = GuestProxy.endpointOf(rec);
      // An agent that lists no watches (one from before them) still has its processes noted.
      const [list, watches] = await beforeDeadline(
        this.clock,
        this.clock.now() + ms,
        Promise.all([this.processes.list(ep), this.processes.watches(ep).catch(() => [])]),
        `the guest did not list its processes and watches within ${ms} ms`,
      );
      return keptOutputOf(list, watches);
    } catch (err) {
      this.log.debug({ vm: rec.name, err: errorMessage(err) }, 'no process list before a save or a pause');
      return undefined;
    }
  }
}
