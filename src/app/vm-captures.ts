import { inject, injectable } from 'inversify';
import { InvalidStateError, errorMessage } from '../domain/errors.js';
import type { VmRecord } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import { VmDisks } from '../ports/hypervisor.js';
import { Logger } from '../ports/logger.js';
import { GuestShares } from './guest-shares.js';
import { VmKeeper } from './vm-keeper.js';
import { Vms } from './vms.js';

/**
 * Captures of a running (or paused) VM (VmDisks.capture), for its forks and its snapshots: marked
 * on its record while taken, its host folders let go of for it and mounted again after. The
 * caller holds the VM's lock.
 */
@injectable()
export class VmCaptures {
  constructor(
    @inject(Vms) private readonly vms: Vms,
    @inject(VmDisks) private readonly disks: VmDisks,
    @inject(VmKeeper) private readonly keeper: VmKeeper,
    @inject(GuestShares) private readonly shares: GuestShares,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
  ) {}

  /**
   * The capture of `src`, marked on its record while it is taken (`saving`: a daemon that dies in
   * it has the guest run on when it starts again, recovery-service.ts). `forks`: how many VMs will
   * stand on it.
   */
  async take(src: VmRecord, forks: number): Promise<{ id: string; paused_ms: number }> {
    src.saving = true;
    await this.vms.save(src);
    try {
      return await this.withFolders(src, forks);
    } finally {
      delete src.saving;
      await this.vms.save(src);
    }
  }

  /**
   * A guest with host folders lets go of them first (they are out of the capture) and mounts them
   * again after it, whether it was taken or not; one that cannot let go (a process works in one) is
   * refused before anything is taken.
   */
  private async withFolders(src: VmRecord, forks: number): Promise<{ id: string; paused_ms: number }> {
    if (!src.mounts.length) return this.disks.capture(this.keeper.ref(src), forks);
    const released = await this.shares.release(src);
    try {
      if (!released)
        throw new InvalidStateError(
          `vm ${src.name} could not let go of its host folders for the capture (a process works in one: its folder or an open file); a capture needs them let go of for a moment`,
        );
      return await this.disks.capture(this.keeper.ref(src), forks, { sharesReleased: true });
    } finally {
      // What it let go of comes back (a share it kept stays mounted).
      await this.shares
        .mount(src, this.clock.now() + 30_000)
        .catch((err: unknown) =>
          this.log.error(
            { vm: src.name, err: errorMessage(err) },
            'the captured vm did not mount its host folders again',
          ),
        );
    }
  }
}
