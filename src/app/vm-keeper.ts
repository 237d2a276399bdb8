import { randomUUID } from 'node:crypto';
import { inject, injectable } from 'inversify';
import type { WaitMode } from '../domain/create-request.js';
import { errorMessage } from '../domain/errors.js';
import type { CreatePhase } from '../domain/events.js';
import type { InstanceRecord } from '../domain/instance.js';
import { Clock } from '../ports/clock.js';
import { GuestAgent } from '../ports/guest-agent.js';
import type { VmHandle, VmRef, VmSpec } from '../ports/hypervisor.js';
import { Hypervisor } from '../ports/hypervisor.js';
import { Logger } from '../ports/logger.js';
import { ActivityLog, InstanceStore } from '../ports/stores.js';
import { SshProbe } from '../ports/tunnels.js';
import { InstanceRegistry } from './instance-registry.js';
import { LifecycleEvents } from './lifecycle-events.js';
import { agentEndpoint, waitReady } from './readiness.js';

/**
 * What lifecycle and creation both do to one VM: persist it, turn it into a hypervisor spec and
 * back, wait for its guest, give it its identity, remove every trace of it, and notice when its
 * process dies on its own.
 */
@injectable()
export class VmKeeper {
  /** VMs whose process died on its own, with the reason; consulted by readiness waits. */
  private readonly deaths = new Map<string, string>();
  /** VMs the service itself is stopping, so their exits are not reported as crashes. */
  private readonly stopping = new Set<string>();

  constructor(
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(GuestAgent) private readonly agent: GuestAgent,
    @inject(SshProbe) private readonly ssh: SshProbe,
    @inject(InstanceStore) private readonly store: InstanceStore,
    @inject(ActivityLog) private readonly activity: ActivityLog,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
    @inject(LifecycleEvents) private readonly events: LifecycleEvents,
    @inject(InstanceRegistry) private readonly registry: InstanceRegistry,
  ) {
    hv.onExit((name, reason) => void this.onProcessExit(name, reason));
  }

  async awaitReady(rec: InstanceRecord, mode: Exclude<WaitMode, 'auto'>, deadline: number, phase: (p: CreatePhase, m: string) => void): Promise<void> {
    this.deaths.delete(rec.name);
    await waitReady({ agent: this.agent, ssh: this.ssh, clock: this.clock }, {
      record: rec, mode, deadline, phase, died: () => this.deaths.get(rec.name),
    });
  }

  /**
   * A guest restored from a snapshot wakes with the clock (and, for a clone, the name) of the moment
   * it was saved: tell it who it is and what time it is. A clone also gets a fresh machine id.
   */
  async setIdentity(rec: InstanceRecord, fresh: boolean): Promise<void> {
    try {
      await this.agent.setIdentity(agentEndpoint(rec), {
        hostname: rec.name, time_ms: this.clock.now(), machine_id: fresh ? randomUUID().replace(/-/g, '') : undefined,
        overlay_ip: fresh ? rec.overlay_ip : undefined,
      });
    } catch (err) {
      if (fresh) throw err;
      this.log.warn({ vm: rec.name, err: errorMessage(err) }, 'could not reset the guest clock after restore');
    }
  }

  async expectExit<T>(rec: InstanceRecord, fn: () => Promise<T>): Promise<T> {
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
    const rec = this.registry.records.get(name);
    if (!rec || (rec.status !== 'running' && rec.status !== 'paused')) return;
    await this.registry.locks.run(name, async () => {
      const cur = this.registry.records.get(name);
      if (!cur || (cur.status !== 'running' && cur.status !== 'paused')) return;
      this.log.error({ vm: name, reason }, 'vm process exited unexpectedly');
      cur.status = 'error';
      cur.error = `vm process exited unexpectedly: ${reason}`;
      this.clearRuntime(cur);
      await this.save(cur);
      this.activity.record({ action: 'crash', target: name, status: 'error', duration_ms: 0, message: cur.error });
      await this.events.emit('down', cur);
    });
  }

  /** Removes every trace of a VM: process, disk, directory, record. With keepLogs, logs survive. */
  async purge(rec: InstanceRecord, keepLogs = false): Promise<void> {
    await this.events.emit('removed', rec);
    await this.expectExit(rec, () => this.hv.destroy(this.ref(rec))).catch((err) =>
      this.log.error({ vm: rec.name, err: errorMessage(err) }, 'hypervisor destroy failed'));
    if (keepLogs) await this.store.keepLogs(rec.name).catch(() => undefined);
    await this.store.remove(rec.name);
    this.registry.records.delete(rec.name);
    this.deaths.delete(rec.name);
  }

  spec(rec: InstanceRecord, forwards: { host_port: number; guest_port: number; proto: 'tcp' | 'udp' }[], key: string): VmSpec {
    return {
      name: rec.name, dir: this.store.dir(rec.name), cpus: rec.cpus, memory_mb: rec.memory_mb, disk_gb: rec.disk_gb,
      image: rec.image, hostname: rec.name, userdata: rec.userdata, mounts: rec.mounts, overlay_ip: rec.overlay_ip,
      forwards: forwards.map((f) => ({ host_port: f.host_port, guest_port: f.guest_port, proto: f.proto })),
      ssh_authorized_key: key,
    };
  }

  applyHandle(rec: InstanceRecord, h: VmHandle): void {
    rec.ip = h.ip;
    rec.ssh_port = h.ssh_port;
    rec.agent_port = h.agent_port;
    rec.agent_cid = h.agent_cid;
    const live = rec.forwards.filter((f) => f.kind === 'live');
    rec.forwards = [...h.forwards.map((f) => ({ ...f, kind: 'boot' as const, pid: h.pid })), ...live];
    rec.runtime = h as unknown as Record<string, unknown>;
  }

  /**
   * Forwards stay in the record (boot ones keep their host ports, live ones are re-opened when the
   * VM is up again); what belonged to the stopped process (ports, pids) goes.
   */
  clearRuntime(rec: InstanceRecord): void {
    rec.ssh_port = 0;
    rec.agent_port = 0;
    rec.agent_cid = 0;
    rec.forwards = rec.forwards.map(({ pid: _p, ...f }) => f);
    delete rec.runtime;
  }

  ref(rec: InstanceRecord): VmRef {
    return { name: rec.name, dir: this.store.dir(rec.name) };
  }

  async save(rec: InstanceRecord): Promise<void> {
    rec.updated_at = new Date(this.clock.now()).toISOString();
    if (this.registry.records.get(rec.name) !== rec) return; // purged meanwhile
    await this.store.put(rec);
  }
}
