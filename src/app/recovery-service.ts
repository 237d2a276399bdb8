import { inject, injectable } from 'inversify';
import { changeStatus, clearRuntime, hasProcess, type VmRecord } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import { GuestNetwork } from '../ports/guest-network.js';
import { Hypervisor } from '../ports/hypervisor.js';
import { Logger } from '../ports/logger.js';
import { GuestShares } from './guest-shares.js';
import { LifecycleEvents } from './lifecycle-events.js';
import { VmKeeper } from './vm-keeper.js';
import { Vms } from './vms.js';

/**
 * Daemon start: loads the records and re-attaches to VMs that were running when the daemon
 * stopped. A create that a crash interrupted is rolled back; a VM whose process is gone but
 * whose suspend the adapter finished (the daemon died before recording it) is suspended; any other
 * ephemeral VM whose process is gone is removed; a persistent one becomes `error` and can be
 * started again. A running guest that had let go of its host folders for a save the daemon died
 * in gets them back (guest-shares.ts).
 */
@injectable()
export class RecoveryService {
  constructor(
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(Logger) private readonly log: Logger,
    @inject(LifecycleEvents) private readonly events: LifecycleEvents,
    @inject(Vms) private readonly vms: Vms,
    @inject(Clock) private readonly clock: Clock,
    @inject(VmKeeper) private readonly keeper: VmKeeper,
    @inject(GuestNetwork) private readonly network: GuestNetwork,
    @inject(GuestShares) private readonly shares: GuestShares,
  ) {}

  async init(): Promise<void> {
    for (const rec of await this.vms.load()) {
      if (rec.status === 'creating') {
        this.log.warn({ vm: rec.name }, 'rolling back a create interrupted by a daemon stop');
        await this.keeper.purge(rec);
        continue;
      }
      if (rec.deleting) {
        this.log.warn({ vm: rec.name }, 'finishing a delete interrupted by a daemon stop');
        await this.keeper.purge(rec);
        continue;
      }
      if (!hasProcess(rec.status)) {
        // Stopped or suspended: no process should run. One that does was started by a verb the
        // daemon died in (a restore, a start) and is held by nothing: stop it.
        await this.hv
          .kill(this.keeper.ref(rec))
          .catch((err: unknown) =>
            this.log.warn({ vm: rec.name, err: String(err) }, 'could not stop a stray vm process'),
          );
        continue;
      }
      const saved = this.keeper.handleOf(rec);
      const handle = saved ? await this.hv.reattach(await this.keeper.bootSpec(rec), saved).catch(() => null) : null;
      if (handle) {
        this.keeper.applyHandle(rec, handle);
        await this.vms.save(rec);
        // The network outlived the daemon with its policy; one attached again lets nothing out until this.
        await this.network
          .setPolicy(this.keeper.ref(rec), rec.egress)
          .catch((err: unknown) =>
            this.log.error({ vm: rec.name, err: String(err) }, 'cannot set the egress policy of a re-attached vm'),
          );
        this.log.info({ vm: rec.name, pid: handle.pid }, 're-attached to running vm');
        await this.unfinishedSave(rec);
        if (rec.status === 'running') await this.events.emit('up', rec);
      } else if (await this.hv.hasSavedState(this.keeper.ref(rec)).catch(() => false)) {
        this.log.warn(
          { vm: rec.name },
          'the vm was saved by a suspend the daemon did not get to record; it is suspended',
        );
        changeStatus(rec, { to: 'suspended', at: new Date(this.clock.now()).toISOString() });
        clearRuntime(rec);
        await this.vms.save(rec);
      } else if (!rec.persistent) {
        this.log.warn({ vm: rec.name }, 'ephemeral vm process is gone; removing it');
        await this.keeper.purge(rec);
      } else {
        changeStatus(rec, { to: 'error', error: 'the vm process was gone when the daemon started' });
        clearRuntime(rec);
        await this.vms.save(rec);
      }
    }
  }

  /**
   * A VM still running, found by a daemon that died in a save of its guest (a suspend, a fork's
   * capture: QEMU's save stops the guest, and one cut off leaves it stopped), or after its guest
   * let go of its host folders for one: a running one's guest runs on, with its folders; a paused
   * one stays paused.
   */
  private async unfinishedSave(rec: VmRecord): Promise<void> {
    if (rec.saving) {
      this.log.warn(
        { vm: rec.name },
        'the daemon died in a save of this vm (a suspend or a fork) before it was finished',
      );
      // One the save had not stopped yet runs already, and says so.
      if (rec.status === 'running') await this.hv.resume(this.keeper.ref(rec)).catch(() => undefined);
      delete rec.saving;
      await this.vms.save(rec);
    }
    if (rec.status === 'running') await this.shares.giveBack(rec, this.keeper.ref(rec));
  }
}
