import { inject, injectable } from 'inversify';
import { errorMessage } from '../domain/errors.js';
import type { LifetimeChange } from '../domain/lifetime.js';
import { toPublic, type Instance, type VmRecord } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import { Logger } from '../ports/logger.js';
import { Activity } from './activity.js';
import type { LifecycleContribution } from './lifecycle-events.js';
import { VmLifecycle } from './vm-lifecycle.js';
import { Vms } from './vms.js';

/** The longest a timer of Node's waits; a later end is waited for in steps. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** A VM still being made when its time ends is looked at again this much later. */
const RETRY_MS = 1000;

/**
 * VMs' lifetimes (docs/api.md, "Lifetime"): a timer per VM with an `expires_at`, armed when it
 * comes up, at the daemon's start for every record, and when its ttl is set; at its end the VM is
 * deleted, or suspended (its time then spent). The end is in the record, so a restart keeps it.
 */
@injectable()
export class LifetimeService implements LifecycleContribution {
  private readonly timers = new Map<string, NodeJS.Timeout>();

  constructor(
    @inject(Vms) private readonly vms: Vms,
    @inject(VmLifecycle) private readonly lifecycle: VmLifecycle,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
    @inject(Activity) private readonly activity: Activity,
  ) {}

  /** Arms the timers of the VMs there are (a daemon start, after recovery). */
  start(): void {
    for (const rec of this.vms.all()) if (!rec.pool) this.arm(rec);
  }

  stop(): void {
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
  }

  onUp(rec: VmRecord): void {
    this.arm(rec);
  }

  onRemoved(rec: VmRecord): void {
    this.disarm(rec.name);
  }

  /** Gives the VM `change.ttl_ms` from now (null: no end), and what its end does. */
  async set(name: string, change: LifetimeChange): Promise<Instance> {
    return this.vms.withVm(name, async (rec) => {
      if (change.ttl_ms === null) {
        delete rec.expires_at;
        delete rec.on_expire;
      } else {
        rec.expires_at = new Date(this.clock.now() + change.ttl_ms).toISOString();
        rec.on_expire = change.on_expire ?? rec.on_expire ?? 'delete';
      }
      await this.vms.save(rec);
      this.arm(rec);
      this.activity.record(
        'ttl',
        name,
        'ok',
        rec.expires_at ? `ends ${rec.expires_at}, then ${rec.on_expire}` : 'lives until deleted',
      );
      return toPublic(rec);
    });
  }

  private arm(rec: VmRecord): void {
    this.disarm(rec.name);
    if (!rec.expires_at) return;
    this.schedule(rec.name, Date.parse(rec.expires_at) - this.clock.now());
  }

  /** Looks at the VM's end again in `ms` (at most as long as one timer waits). */
  private schedule(name: string, ms: number): void {
    const t = setTimeout(() => void this.expire(name), Math.min(Math.max(0, ms), MAX_TIMER_MS));
    t.unref();
    this.timers.set(name, t);
  }

  private disarm(name: string): void {
    clearTimeout(this.timers.get(name));
    this.timers.delete(name);
  }

  private async expire(name: string): Promise<void> {
    this.timers.delete(name);
    const rec = this.vms.find(name);
    if (!rec?.expires_at) return;
    // Moved meanwhile, or further than one timer waits.
    if (Date.parse(rec.expires_at) > this.clock.now()) return this.arm(rec);
    if (rec.status === 'creating') return this.schedule(name, RETRY_MS);
    const action = rec.on_expire ?? 'delete';
    this.log.info({ vm: name, action, expires_at: rec.expires_at }, 'vm lifetime ended');
    this.activity.record('expire', name, 'ok', `its lifetime ended at ${rec.expires_at}: ${action}`);
    try {
      if (action === 'delete') {
        await this.lifecycle.delete(name);
        return;
      }
      if (rec.status === 'running' || rec.status === 'paused') await this.lifecycle.suspend(name);
      // The time is spent: a restored VM runs until told otherwise.
      await this.vms.withVm(name, async (r) => {
        delete r.expires_at;
        delete r.on_expire;
        await this.vms.save(r);
      });
    } catch (err) {
      this.log.warn({ vm: name, action, err: errorMessage(err) }, 'the end of a vm lifetime could not be carried out');
      this.activity.record('expire', name, 'error', errorMessage(err));
    }
  }
}
