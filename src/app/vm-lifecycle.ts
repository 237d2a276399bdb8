import { inject, injectable } from 'inversify';
import type { Instance, VmRecord, LifecycleVerb } from '../domain/vm.js';
import { assertTransition, changeStatus, clearRuntime, toPublic } from '../domain/vm.js';
import { assertVmName } from '../domain/names.js';
import { Clock } from '../ports/clock.js';
import { Hypervisor, type SaveOptions } from '../ports/hypervisor.js';
import { ControlMetrics } from '../ports/metrics.js';
import { Activity } from './activity.js';
import type { Config } from './config.js';
import { LifecycleEvents } from './lifecycle-events.js';
import { AppConfig } from './tokens.js';
import { VmKeeper } from './vm-keeper.js';
import { Vms } from './vms.js';
import { Failpoints } from '../ports/failpoints.js';
import { CrashWatch } from './crash-watch.js';
import { GuestWarmUp } from './guest-warm-up.js';
import { GuestShares } from './guest-shares.js';
import { KeptOutputs, PAUSE_LIST_MS } from './kept-output.js';
import type { KeptOutput } from '../domain/timeline.js';

export interface MessageResult {
  message: string;
  name: string;
}

/**
 * The VM lifecycle verbs: delete, start, shutdown, pause, resume, suspend, restore. Each runs
 * under the VM's lock and is refused (with the verb to use instead) from a state it does not fit.
 */
@injectable()
export class VmLifecycle {
  constructor(
    @inject(AppConfig) private readonly config: Config,
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(ControlMetrics) private readonly metrics: ControlMetrics,
    @inject(Clock) private readonly clock: Clock,
    @inject(Activity) private readonly activity: Activity,
    @inject(LifecycleEvents) private readonly events: LifecycleEvents,
    @inject(Vms) private readonly vms: Vms,
    @inject(VmKeeper) private readonly keeper: VmKeeper,
    @inject(Failpoints) private readonly failpoints: Failpoints,
    @inject(CrashWatch) private readonly crashes: CrashWatch,
    @inject(GuestWarmUp) private readonly warmUp: GuestWarmUp,
    @inject(GuestShares) private readonly shares: GuestShares,
    @inject(KeptOutputs) private readonly keptOutputs: KeptOutputs,
  ) {}

  async delete(name: string): Promise<MessageResult> {
    assertVmName(name);
    // Whatever holds the lock waiting on the guest (an agent deploy) gives up for the delete.
    this.vms.interrupt(name);
    return this.activity.timed('delete', name, () =>
      this.vms.withVm(name, async (rec) => {
        const clones = this.vms
          .all()
          .filter((r) => r.from === name && !r.pool)
          .map((r) => r.name)
          .sort();
        await this.keeper.purge(rec);
        this.metrics.vmDeleted();
        // Deleting a template leaves its clones as they are: say so, they were made from it.
        const kept = clones.length
          ? `; its clones ${clones.join(', ')} are kept, with the disk layer they share with it`
          : '';
        return { message: `vm ${name} deleted${kept}`, name };
      }),
    );
  }

  async start(name: string): Promise<Instance> {
    return this.transition(name, 'start', async (rec) => {
      await this.keeper.boot(rec, false);
      return toPublic(rec);
    });
  }

  /**
   * A restore whose saved state does not load cold-boots the VM rather than failing it: the
   * activity log's entry says so, and why (the guest's processes ended: docs/processes.md).
   * `paused`: the guest stays paused once its state is loaded (a paused VM's move: its guest does
   * not run on the new node until it is resumed there); a restore that cold-boots runs it.
   */
  async restore(name: string, options: { paused?: boolean } = {}): Promise<Instance> {
    let cold: string | undefined;
    return this.transition(
      name,
      'restore',
      async (rec) => {
        cold = await this.keeper.boot(rec, true, options.paused);
        if (!cold) return toPublic(rec);
        return { ...toPublic(rec), warning: `cold-booted, its processes ended: ${cold}` };
      },
      () => (cold ? `cold-booted: ${cold}` : undefined),
    );
  }

  async shutdown(name: string): Promise<MessageResult> {
    return this.transition(name, 'shutdown', async (rec) => {
      if (rec.status === 'stopped') return { message: `vm ${name} is already stopped`, name };
      await this.events.emit('down', rec);
      await this.crashes.expectExit(rec, () => this.hv.stop(this.keeper.ref(rec), this.config.shutdown_timeout_ms));
      this.failpoints.hit('shutdown.stopped');
      if (!rec.persistent) {
        await this.keeper.purge(rec);
        this.metrics.vmDeleted();
        return { message: `vm ${name} shut down and removed (ephemeral)`, name };
      }
      changeStatus(rec, { to: 'stopped' });
      clearRuntime(rec);
      await this.vms.save(rec);
      return { message: `vm ${name} shut down`, name };
    });
  }

  async pause(name: string): Promise<MessageResult> {
    return this.transition(name, 'pause', async (rec) => {
      // Asked now (a pause is of a running guest): held, it cannot say it to a snapshot or a suspend.
      const kept = await this.keptOutputs.note(rec, PAUSE_LIST_MS);
      await this.hv.pause(this.keeper.ref(rec));
      changeStatus(rec, { to: 'paused' });
      if (kept) rec.saved_output = kept;
      await this.vms.save(rec);
      return { message: `vm ${name} paused`, name };
    });
  }

  async resume(name: string): Promise<MessageResult> {
    return this.transition(name, 'resume', async (rec) => {
      const wake = rec.wake_at_resume;
      await this.hv.resume(this.keeper.ref(rec));
      changeStatus(rec, { to: 'running' });
      // Restored paused: it wakes now, as a restore's guest does.
      if (wake) await this.keeper.wake(rec);
      else await this.vms.save(rec);
      return { message: `vm ${name} resumed`, name };
    });
  }

  /** `forMove`: the move service's, whose other node restores the VM (SaveOptions). */
  async suspend(name: string, options: Pick<SaveOptions, 'forMove'> = {}): Promise<MessageResult> {
    return this.transition(name, 'suspend', async (rec) => {
      await this.events.emit('down', rec);
      // Marked first: a daemon that dies in the save has the guest run on (recovery-service.ts).
      rec.saving = true;
      await this.vms.save(rec);
      let sharesReleased = false;
      let snapshot: boolean;
      let kept: KeptOutput | undefined;
      try {
        if (rec.status === 'running') {
          await this.warmUp.beforeSave(rec);
          kept = await this.keptOutputs.note(rec);
        } else kept = rec.saved_output; // noted at its pause
        // Its shares are let go of, or it is not saved (a paused guest cannot be asked: guest-shares.ts).
        sharesReleased = rec.mounts.length > 0 && rec.status === 'running' && (await this.shares.release(rec));
        this.failpoints.hit('suspend.saving');
        ({ snapshot } = await this.crashes.expectExit(rec, () =>
          this.hv.suspend(this.keeper.ref(rec), { sharesReleased, ...options }),
        ));
      } catch (err) {
        delete rec.saving;
        await this.vms.save(rec);
        // Not saved, and maybe running on: without the folders it let go of, unless given them back.
        if (sharesReleased) await this.shares.giveBack(rec, this.keeper.ref(rec));
        throw err;
      }
      this.failpoints.hit('suspend.saved');
      changeStatus(rec, { to: 'suspended', at: new Date(this.clock.now()).toISOString() });
      if (kept && snapshot) rec.saved_output = kept;
      else delete rec.saved_output;
      clearRuntime(rec);
      await this.vms.save(rec);
      return { message: `vm ${name} suspended${snapshot ? '' : ' (no snapshot: restore will cold-boot)'}`, name };
    });
  }

  /** `note`: what the activity log's entry says of a verb that succeeded. */
  private async transition<T>(
    name: string,
    verb: LifecycleVerb,
    fn: (rec: VmRecord) => Promise<T>,
    note?: () => string | undefined,
  ): Promise<T> {
    assertVmName(name);
    return this.activity.timed(
      verb,
      name,
      () =>
        this.vms.withVm(name, async (rec) => {
          assertTransition(rec, verb);
          return fn(rec);
        }),
      { noteOf: note },
    );
  }
}
