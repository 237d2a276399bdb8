import { inject, injectable } from 'inversify';
import { NotFoundError, errorMessage } from '../domain/errors.js';
import type { Instance, InstanceRecord, LifecycleVerb } from '../domain/instance.js';
import { assertTransition, hasProcess, toPublic } from '../domain/instance.js';
import { assertVmName } from '../domain/names.js';
import { Clock } from '../ports/clock.js';
import type { VmHandle } from '../ports/hypervisor.js';
import { Hypervisor } from '../ports/hypervisor.js';
import { Logger } from '../ports/logger.js';
import { ControlMetrics } from '../ports/metrics.js';
import { ActivityLog, InstanceStore } from '../ports/stores.js';
import { SshKeys } from '../ports/tunnels.js';
import type { Config } from './config.js';
import { InstanceRegistry } from './instance-registry.js';
import { LifecycleEvents } from './lifecycle-events.js';
import { AppConfig } from './tokens.js';
import { VmKeeper } from './vm-keeper.js';

export type { CreateJob } from './create-service.js';

export interface MessageResult {
  message: string;
  name: string;
}

/**
 * The VM lifecycle use cases: reads, start, shutdown, pause, resume, suspend, restore, delete,
 * and restoring state when the daemon starts. Each verb runs under the VM's lock and is refused
 * (with the verb to use instead) from a state it does not fit.
 */
@injectable()
export class InstanceService {
  constructor(
    @inject(AppConfig) private readonly config: Config,
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(SshKeys) private readonly keys: SshKeys,
    @inject(InstanceStore) private readonly store: InstanceStore,
    @inject(ActivityLog) private readonly activity: ActivityLog,
    @inject(ControlMetrics) private readonly metrics: ControlMetrics,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
    @inject(LifecycleEvents) private readonly events: LifecycleEvents,
    @inject(InstanceRegistry) private readonly registry: InstanceRegistry,
    @inject(VmKeeper) private readonly keeper: VmKeeper,
  ) {
    metrics.setRunningSource(() => registry.count((r) => r.status === 'running'));
  }

  /**
   * Loads the records and re-attaches to VMs that were running when the daemon stopped. A create
   * that a crash interrupted is rolled back; an ephemeral VM whose process is gone is removed; a
   * persistent one becomes `error`.
   */
  async init(): Promise<void> {
    for (const rec of await this.store.list()) this.registry.records.set(rec.name, rec);
    for (const rec of [...this.registry.records.values()]) {
      if (rec.status === 'creating') {
        this.log.warn({ vm: rec.name }, 'rolling back a create interrupted by a daemon stop');
        await this.keeper.purge(rec);
        continue;
      }
      if (!hasProcess(rec.status)) continue;
      const handle = rec.runtime ? await this.hv.reattach(this.keeper.ref(rec), rec.runtime as unknown as VmHandle).catch(() => null) : null;
      if (handle) {
        this.keeper.applyHandle(rec, handle);
        await this.keeper.save(rec);
        this.log.info({ vm: rec.name, pid: handle.pid }, 're-attached to running vm');
        if (rec.status === 'running') await this.events.emit('up', rec);
      } else if (!rec.persistent) {
        this.log.warn({ vm: rec.name }, 'ephemeral vm process is gone; removing it');
        await this.keeper.purge(rec);
      } else {
        rec.status = 'error';
        rec.error = 'the vm process was gone when the daemon started';
        this.keeper.clearRuntime(rec);
        await this.keeper.save(rec);
      }
    }
  }

  /** Every VM but unclaimed warm pool members, by name. */
  list(): Instance[] {
    return [...this.registry.records.values()].filter((r) => !r.pool).sort((a, b) => a.name.localeCompare(b.name)).map(toPublic);
  }

  /** Warm pool members of a template (GET /pool). */
  poolMembers(template: string): InstanceRecord[] {
    return [...this.registry.records.values()].filter((r) => r.pool === template);
  }

  get(name: string): Instance {
    return toPublic(this.registry.mustGet(name));
  }

  /** The full record, for services that act on a VM (agent proxy, forwards). */
  record(name: string): InstanceRecord {
    return this.registry.mustGet(name);
  }

  /** Runs `fn` while holding the VM's lock, so it cannot interleave with a lifecycle change. */
  withLock<T>(name: string, fn: (rec: InstanceRecord) => Promise<T>): Promise<T> {
    return this.registry.locks.run(name, async () => fn(this.registry.mustGet(name)));
  }

  async saveRecord(rec: InstanceRecord): Promise<void> {
    await this.keeper.save(rec);
  }

  async delete(name: string): Promise<MessageResult> {
    assertVmName(name);
    return this.timed('delete', name, () => this.registry.locks.run(name, async () => {
      const rec = this.registry.mustGet(name);
      await this.keeper.purge(rec);
      this.metrics.vmDeleted();
      return { message: `vm ${name} deleted`, name };
    }));
  }

  async start(name: string): Promise<Instance> {
    return this.transition(name, 'start', async (rec) => {
      await this.boot(rec, false);
      return toPublic(rec);
    });
  }

  async restore(name: string): Promise<Instance> {
    return this.transition(name, 'restore', async (rec) => {
      await this.boot(rec, true);
      return toPublic(rec);
    });
  }

  async shutdown(name: string): Promise<MessageResult> {
    return this.transition(name, 'shutdown', async (rec) => {
      if (rec.status === 'stopped') return { message: `vm ${name} is already stopped`, name };
      await this.events.emit('down', rec);
      await this.keeper.expectExit(rec, () => this.hv.stop(this.keeper.ref(rec), this.config.shutdown_timeout_ms));
      if (!rec.persistent) {
        await this.keeper.purge(rec);
        this.metrics.vmDeleted();
        return { message: `vm ${name} shut down and removed (ephemeral)`, name };
      }
      rec.status = 'stopped';
      delete rec.suspended_at;
      this.keeper.clearRuntime(rec);
      await this.keeper.save(rec);
      return { message: `vm ${name} shut down`, name };
    });
  }

  async pause(name: string): Promise<MessageResult> {
    return this.transition(name, 'pause', async (rec) => {
      await this.hv.pause(this.keeper.ref(rec));
      rec.status = 'paused';
      await this.keeper.save(rec);
      return { message: `vm ${name} paused`, name };
    });
  }

  async resume(name: string): Promise<MessageResult> {
    return this.transition(name, 'resume', async (rec) => {
      await this.hv.resume(this.keeper.ref(rec));
      rec.status = 'running';
      await this.keeper.save(rec);
      return { message: `vm ${name} resumed`, name };
    });
  }

  async suspend(name: string): Promise<MessageResult> {
    return this.transition(name, 'suspend', async (rec) => {
      await this.events.emit('down', rec);
      const { snapshot } = await this.keeper.expectExit(rec, () => this.hv.suspend(this.keeper.ref(rec)));
      rec.status = 'suspended';
      rec.suspended_at = new Date(this.clock.now()).toISOString();
      this.keeper.clearRuntime(rec);
      await this.keeper.save(rec);
      return { message: `vm ${name} suspended${snapshot ? '' : ' (no snapshot: restore will cold-boot)'}`, name };
    });
  }

  /** Stops every VM's background work; VM processes keep running (they are detached). */
  async close(): Promise<void> {
    await this.activity.flush();
  }

  private async boot(rec: InstanceRecord, restore: boolean): Promise<void> {
    const spec = this.keeper.spec(rec, rec.forwards.filter((f) => f.kind === 'boot'), await this.keys.publicKey());
    const handle = await this.hv.launch(spec, { restore });
    this.keeper.applyHandle(rec, handle);
    rec.status = 'running';
    delete rec.error;
    delete rec.suspended_at;
    await this.keeper.save(rec);
    const image = await this.hv.resolveImage(rec.image).catch(() => ({ agent_ready: false }));
    try {
      await this.keeper.awaitReady(rec, image.agent_ready ? 'agent' : 'ssh', this.clock.now() + this.config.ready_timeout_ms, () => undefined);
      if (restore && image.agent_ready) await this.keeper.setIdentity(rec, false);
    } catch (err) {
      await this.hv.kill(this.keeper.ref(rec)).catch(() => undefined);
      rec.status = 'error';
      rec.error = errorMessage(err);
      this.keeper.clearRuntime(rec);
      await this.keeper.save(rec);
      throw err;
    }
    await this.events.emit('up', rec);
  }

  private async transition<T>(name: string, verb: LifecycleVerb, fn: (rec: InstanceRecord) => Promise<T>): Promise<T> {
    assertVmName(name);
    return this.timed(verb, name, () => this.registry.locks.run(name, async () => {
      const rec = this.registry.mustGet(name);
      assertTransition(rec, verb);
      return fn(rec);
    }));
  }

  private async timed<T>(action: string, target: string, fn: () => Promise<T>): Promise<T> {
    const t0 = this.clock.now();
    try {
      const out = await fn();
      this.activity.record({ action, target, status: 'ok', duration_ms: this.clock.now() - t0 });
      return out;
    } catch (err) {
      if (!(err instanceof NotFoundError)) {
        this.activity.record({ action, target, status: 'error', duration_ms: this.clock.now() - t0, message: errorMessage(err) });
      }
      throw err;
    }
  }
}
