import { inject, injectable } from 'inversify';
import { changeStatus, clearRuntime, type VmRecord } from '../domain/vm.js';
import { Hypervisor } from '../ports/hypervisor.js';
import { Logger } from '../ports/logger.js';
import { Activity } from './activity.js';
import { LifecycleEvents } from './lifecycle-events.js';
import { Vms } from './vms.js';

/**
 * Notices VM processes that die on their own: the VM becomes `error` (with why) and the readiness
 * wait of one that was booting stops at once. Exits the control plane asked for (`expectExit`)
 * are not crashes.
 */
@injectable()
export class CrashWatch {
  /** VMs whose process died on its own, with the reason; consulted by readiness waits. */
  private readonly deaths = new Map<string, string>();
  /** VMs the service itself is stopping, so their exits are not reported as crashes. */
  private readonly stopping = new Set<string>();

  constructor(
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(Logger) private readonly log: Logger,
    @inject(Activity) private readonly activity: Activity,
    @inject(LifecycleEvents) private readonly events: LifecycleEvents,
    @inject(Vms) private readonly vms: Vms,
  ) {}

  /** Starts listening to the hypervisor's exits (the composition root calls it once). */
  start(): void {
    this.hv.onExit((name, reason) => void this.onProcessExit(name, reason));
  }

  /** Why the VM's process died on its own since `forget`, if it did. */
  died(name: string): string | undefined {
    return this.deaths.get(name);
  }

  forget(name: string): void {
    this.deaths.delete(name);
  }

  /** Runs `fn`, during which the VM's process ending is asked for, not a crash. */
  async expectExit<T>(rec: VmRecord, fn: () => Promise<T>): Promise<T> {
    this.stopping.add(rec.name);
    try {
      return await fn();
    } finally {
      this.stopping.delete(rec.name);
    }
  }

  async onProcessExit(name: string, reason: string): Promise<void> {
    if (this.stopping.has(name)) return;
    this.deaths.set(name, reason);
    const rec = this.vms.find(name);
    if (!rec || (rec.status !== 'running' && rec.status !== 'paused')) return;
    await this.vms.locked(name, async () => {
      const cur = this.vms.find(name);
      if (!cur || (cur.status !== 'running' && cur.status !== 'paused')) return;
      this.log.error({ vm: name, reason }, 'vm process exited unexpectedly');
      changeStatus(cur, { to: 'error', error: `vm process exited unexpectedly: ${reason}` });
      clearRuntime(cur);
      await this.vms.save(cur);
      this.activity.record('crash', name, 'error', cur.error);
      await this.events.emit('down', cur);
    });
  }
}
