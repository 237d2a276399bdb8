import { inject, injectable } from 'inversify';
import { errorMessage, UnavailableError } from '../domain/errors.js';
import type { VmRecord } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import { GuestAgent } from '../ports/guest-agent.js';
import { HostLinks, type VmRef } from '../ports/hypervisor.js';
import { Logger } from '../ports/logger.js';
import { agentEndpoint } from './readiness.js';
import { Vms } from './vms.js';

/** How long a guest has to let go of its shares before it is saved (then it is saved without them: not at all). */
const RELEASE_MS = 10_000;
/** How long a guest that gets its shares back has to mount them. */
const MOUNT_AGAIN_MS = 30_000;

/**
 * A guest's host folders across a saved state (docs/suspend-and-clones.md): no saved state holds
 * a share, so a guest lets go of its shares before it is saved and is given them again as it
 * wakes, where the driver can (HostLinks `mountsAfterRestore`, `releaseMounts`). A guest without
 * them is marked so (`shares_out`): before it is told to let go of them, and while a woken one has
 * yet to mount them (vm-keeper.ts). The mark goes once they are back or it is saved: a daemon that
 * dies between gives them back when it starts again.
 */
@injectable()
export class GuestShares {
  constructor(
    @inject(GuestAgent) private readonly agent: GuestAgent,
    @inject(HostLinks) private readonly links: HostLinks,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
    @inject(Vms) private readonly vms: Vms,
  ) {}

  /** Can a guest with `rec`'s shares wake from a saved state with them? */
  restorable(rec: Pick<VmRecord, 'mounts'>): boolean {
    return !rec.mounts.length || !!this.links.mountsAfterRestore?.(rec.mounts);
  }

  /**
   * A guest that woke from a saved state was given its shares as it woke: it mounts them now, as a
   * booted one did at boot. A share that did not come or did not mount throws, naming it.
   */
  async mount(rec: VmRecord, deadline: number): Promise<void> {
    if (!rec.mounts.length) return;
    const script = this.links.mountsAfterRestore?.(rec.mounts);
    if (!script)
      throw new UnavailableError(`vm ${rec.name} woke from a saved state, which cannot take host folders here`);
    const t0 = this.clock.now();
    try {
      const failed = await this.run(rec, script, Math.max(1000, deadline - t0));
      if (failed)
        throw new UnavailableError(`vm ${rec.name} could not mount its host folders: ${failed.slice(0, 500)}`);
    } finally {
      // Given back, or not to be: a guest that cannot mount them now would not at the next start either.
      await this.unmark(rec);
    }
    this.log.info({ vm: rec.name, mounts: rec.mounts.length, mount_ms: this.clock.now() - t0 }, 'shares mounted');
  }

  /**
   * A running guest marked without its shares (`shares_out`: it let go of them for a save that was
   * not finished, or woke and had yet to mount them, when its daemon died) is given them again:
   * plugged in where a save had unplugged them, and mounted. A guest that cannot take them is told
   * in the log, and runs on without them.
   */
  async giveBack(rec: VmRecord, ref: VmRef): Promise<void> {
    if (!rec.shares_out) return;
    this.log.warn(
      { vm: rec.name },
      'the vm was without its host folders (a save or a restore not finished); giving them back',
    );
    try {
      await this.links.giveSharesBack?.(ref, rec.mounts);
      await this.mount(rec, this.clock.now() + MOUNT_AGAIN_MS);
    } catch (err) {
      this.log.error({ vm: rec.name, err: errorMessage(err) }, 'the vm did not get its host folders back');
    } finally {
      await this.unmark(rec);
    }
  }

  private async unmark(rec: VmRecord): Promise<void> {
    if (!rec.shares_out) return;
    delete rec.shares_out;
    await this.vms.save(rec);
  }

  /**
   * Before a running guest is saved: it lets go of its shares. Resolves whether it did (none to let
   * go of counts); a share in use, a guest that does not answer or a driver that cannot give them
   * back after a restore resolve false, and the VM is then not saved (its restore boots).
   */
  async release(rec: VmRecord): Promise<boolean> {
    if (!rec.mounts.length) return true;
    const script = this.links.releaseMounts?.(rec.mounts);
    if (!script) return false;
    rec.shares_out = true;
    await this.vms.save(rec);
    try {
      const failed = await this.run(rec, script, RELEASE_MS);
      if (!failed) return true;
      this.log.warn({ vm: rec.name, err: failed }, 'the guest kept its shares; it is not saved');
    } catch (err) {
      this.log.warn(
        { vm: rec.name, err: errorMessage(err) },
        'the guest did not let go of its shares; it is not saved',
      );
    }
    return false;
  }

  /** Runs `script` as root in `rec`'s guest: undefined when it succeeded, else what the guest said. */
  private async run(rec: VmRecord, script: string, timeoutMs: number): Promise<string | undefined> {
    const r = await this.agent.exec(agentEndpoint(rec), { cmd: '/bin/sh', args: ['-c', script], timeoutMs });
    return r.exit_code === 0 ? undefined : (r.stderr || r.error || `exit code ${r.exit_code}`).trim();
  }
}
