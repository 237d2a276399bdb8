import { randomUUID } from 'node:crypto';
import { inject, injectable } from 'inversify';
import type { WaitMode } from '../domain/create-request.js';
import { AgentUnavailableError, errorMessage } from '../domain/errors.js';
import type { CreatePhase } from '../domain/events.js';
import type { InstanceRecord } from '../domain/instance.js';
import { Clock } from '../ports/clock.js';
import { Failpoints } from '../ports/failpoints.js';
import { GuestAgent } from '../ports/guest-agent.js';
import type { ImageInfo, SpareWarmUp, VmHandle, VmRef, VmSpec } from '../ports/hypervisor.js';
import { GuestImages, Hypervisor } from '../ports/hypervisor.js';
import { Logger } from '../ports/logger.js';
import { InstanceStore } from '../ports/stores.js';
import { RemoteShell, SshKeys, SshProbe } from '../ports/tunnels.js';
import { Activity } from './activity.js';
import type { Config } from './config.js';
import { LifecycleEvents } from './lifecycle-events.js';
import { beforeDeadline } from './deadline.js';
import { agentEndpoint, waitReady } from './readiness.js';
import { AppConfig } from './tokens.js';
import { Vms } from './vms.js';

/** How long a suspend waits for the warm-up (a guest that does not answer is saved as is). */
const WARM_MS = 3000;

/**
 * What lifecycle and creation both do to one VM: turn it into a hypervisor spec and back, boot it
 * and wait for its guest, give it its identity, remove every trace of it, and notice when its
 * process dies on its own.
 */
@injectable()
export class VmKeeper {
  /** VMs whose process died on its own, with the reason; consulted by readiness waits. */
  private readonly deaths = new Map<string, string>();
  /** VMs the service itself is stopping, so their exits are not reported as crashes. */
  private readonly stopping = new Set<string>();

  constructor(
    @inject(AppConfig) private readonly config: Config,
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(GuestImages) private readonly images: GuestImages,
    @inject(GuestAgent) private readonly agent: GuestAgent,
    @inject(SshProbe) private readonly ssh: SshProbe,
    @inject(RemoteShell) private readonly remote: RemoteShell,
    @inject(SshKeys) private readonly keys: SshKeys,
    @inject(InstanceStore) private readonly store: InstanceStore,
    @inject(Activity) private readonly activity: Activity,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
    @inject(LifecycleEvents) private readonly events: LifecycleEvents,
    @inject(Vms) private readonly vms: Vms,
    @inject(Failpoints) private readonly failpoints: Failpoints,
  ) {
    hv.onExit((name, reason) => void this.onProcessExit(name, reason));
  }

  /** What `wait=auto` means for an image: agent readiness for golden images, SSH otherwise. */
  static waitFor(mode: WaitMode, image: Pick<ImageInfo, 'agent_ready'>): Exclude<WaitMode, 'auto'> {
    return mode === 'auto' ? (image.agent_ready ? 'agent' : 'ssh') : mode;
  }

  /**
   * Waits for the guest under `mode`, and gives a guest with an agent its `identity` when asked
   * (`fresh` for a clone or a pool member: a new machine id, and a failure fails the wait; otherwise
   * a restore of the VM itself, whose failure to set the clock is only logged). A guest `restored`
   * from a snapshot already runs its agent: the identity is the first agent call, in place of the
   * health probe; otherwise it follows the wait, within the deadline.
   */
  async awaitReady(
    rec: InstanceRecord, mode: Exclude<WaitMode, 'auto'>, deadline: number, phase: (p: CreatePhase, m: string) => void,
    image?: Pick<ImageInfo, 'agent_ready' | 'ssh_user'>, identity?: { fresh: boolean; restored: boolean },
  ): Promise<void> {
    this.deaths.delete(rec.name);
    const viaAgent = identity !== undefined && !!image?.agent_ready;
    const folded = viaAgent && identity.restored && mode !== 'ssh';
    await waitReady({ agent: this.agent, ssh: this.ssh, remote: this.remote, clock: this.clock }, {
      record: rec, mode, deadline, phase, died: () => this.deaths.get(rec.name),
      sshUser: image && !image.agent_ready ? image.ssh_user : undefined,
      firstCall: folded ? () => this.setIdentity(rec, identity.fresh) : undefined,
    });
    if (viaAgent && !folded) await beforeDeadline(this.clock, deadline, this.setIdentity(rec, identity.fresh));
  }

  /**
   * Boots a stopped, suspended or failed VM (start, restore) and waits for its guest; on failure
   * the process is killed and the VM is left `error`, and the error is thrown.
   */
  async boot(rec: InstanceRecord, restore: boolean): Promise<void> {
    const handle = await this.hv.launch(await this.spec(rec, rec.forwards.filter((f) => f.kind === 'boot')), { restore });
    if (restore) this.failpoints.hit('restore.launched');
    this.applyHandle(rec, handle);
    rec.status = 'running';
    delete rec.error;
    delete rec.suspended_at;
    await this.vms.save(rec);
    const image = await this.images.resolveImage(rec.image).catch(() => ({ agent_ready: false, ssh_user: 'root' }));
    try {
      await this.awaitReady(rec, VmKeeper.waitFor('auto', image), this.clock.now() + this.config.ready_timeout_ms, () => undefined, image, handle.restored_from_snapshot ? { fresh: false, restored: true } : undefined);
    } catch (err) {
      await this.hv.kill(this.ref(rec)).catch(() => undefined);
      rec.status = 'error';
      rec.error = errorMessage(err);
      this.clearRuntime(rec);
      await this.vms.save(rec);
      throw err;
    }
    await this.events.emit('up', rec);
  }

  /**
   * A guest restored from a snapshot wakes with the clock (and, for a clone, the name) of the moment
   * it was saved: tell it who it is and what time it is. A clone also gets a fresh machine id.
   */
  async setIdentity(rec: InstanceRecord, fresh: boolean): Promise<void> {
    const t0 = this.clock.now();
    try {
      await this.agent.setIdentity(agentEndpoint(rec), {
        hostname: rec.name, time_ms: this.clock.now(), machine_id: fresh ? randomUUID().replace(/-/g, '') : undefined,
        overlay_ip: fresh ? rec.overlay_ip : undefined,
      });
      this.log.info({ vm: rec.name, identity_ms: this.clock.now() - t0 }, 'identity timing');
    } catch (err) {
      // Not reached yet: the caller decides whether to try again.
      if (fresh || err instanceof AgentUnavailableError) throw err;
      this.log.warn({ vm: rec.name, err: errorMessage(err) }, 'could not reset the guest clock after restore');
    }
  }

  /**
   * Before a running guest is saved: the identity it already has, once more, then one exec of
   * `sync`. A restored guest's first call is its identity, and under TCG a path never taken before
   * the save is slow after it (page cache, lazily compiled agent code); taken once, it is in the
   * saved RAM, and a clone is ready in about half the time. The exec does the same for the first
   * command people run after a restore, and `sync` leaves no writeback of the template's own for
   * its clones to do in their first second (docs/suspend-and-clones.md). Best effort and bounded: a
   * guest without an agent is saved as is.
   */
  async warmBeforeSave(rec: InstanceRecord): Promise<void> {
    const ep = agentEndpoint(rec);
    const until = this.clock.now() + WARM_MS;
    // The exec gets what is left of the bound, so no `sync` is still running in the saved guest.
    const calls = this.agent.setIdentity(ep, { hostname: rec.name, time_ms: this.clock.now() })
      .then(() => this.agent.exec(ep, { cmd: 'sync', args: [], timeoutMs: Math.max(1, until - this.clock.now()) }))
      .catch(() => undefined);
    await Promise.race([calls, this.clock.sleep(WARM_MS)]);
  }

  /**
   * What a guest restored ahead of a template's next clone runs (VmDisks.warmSpares): its identity
   * under its own name with a machine id, then an exec of `true`, the calls a clone's first answer
   * and first command take. A just-restored agent may not be reachable for a moment: the identity
   * is tried again every 100 ms, 20 times at most. An image without `true` still took the exec
   * path: only a guest that cannot be reached fails that step.
   */
  readonly spareWarmUp: SpareWarmUp = {
    firstAnswer: async (ep, name) => {
      for (let tries = 1; ; tries++) {
        try {
          return await this.agent.setIdentity(ep, { hostname: name, time_ms: this.clock.now(), machine_id: randomUUID().replace(/-/g, '') });
        } catch (err) {
          if (!(err instanceof AgentUnavailableError) || tries >= 20) throw err;
          await this.clock.sleep(100);
        }
      }
    },
    firstCommand: async (ep) => {
      await this.agent.exec(ep, { cmd: 'true', args: [], timeoutMs: WARM_MS }).catch((err: unknown) => {
        if (err instanceof AgentUnavailableError) throw err;
      });
    },
  };

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
    const rec = this.vms.find(name);
    if (!rec || (rec.status !== 'running' && rec.status !== 'paused')) return;
    await this.vms.locked(name, async () => {
      const cur = this.vms.find(name);
      if (!cur || (cur.status !== 'running' && cur.status !== 'paused')) return;
      this.log.error({ vm: name, reason }, 'vm process exited unexpectedly');
      cur.status = 'error';
      cur.error = `vm process exited unexpectedly: ${reason}`;
      this.clearRuntime(cur);
      await this.vms.save(cur);
      this.activity.record('crash', name, 'error', cur.error);
      await this.events.emit('down', cur);
    });
  }

  /** Removes every trace of a VM: process, disk, directory, record. With keepLogs, logs survive. */
  async purge(rec: InstanceRecord, keepLogs = false): Promise<void> {
    // Intent first: from here on a crash leaves a record that says to finish the delete.
    if (rec.status !== 'creating' && !rec.deleting) {
      rec.deleting = true;
      await this.vms.save(rec);
    }
    await this.events.emit('removed', rec);
    await this.expectExit(rec, () => this.hv.destroy(this.ref(rec))).catch((err) =>
      this.log.error({ vm: rec.name, err: errorMessage(err) }, 'hypervisor destroy failed'));
    this.failpoints.hit('delete.destroyed');
    if (keepLogs) await this.store.keepLogs(rec.name).catch(() => undefined);
    await this.store.remove(rec.name);
    this.vms.forget(rec.name);
    this.deaths.delete(rec.name);
  }

  /** The hypervisor's view of the VM, with these boot forwards and the daemon's SSH key. */
  async spec(rec: InstanceRecord, forwards: { host_port: number; guest_port: number; proto: 'tcp' | 'udp' }[]): Promise<VmSpec> {
    return {
      name: rec.name, dir: this.store.dir(rec.name), cpus: rec.cpus, memory_mb: rec.memory_mb, disk_gb: rec.disk_gb,
      image: rec.image, hostname: rec.name, userdata: rec.userdata, mounts: rec.mounts, overlay_ip: rec.overlay_ip, egress: rec.egress,
      forwards: forwards.map((f) => ({ host_port: f.host_port, guest_port: f.guest_port, proto: f.proto })),
      ssh_authorized_key: await this.keys.publicKey(),
    };
  }

  /** Takes what the hypervisor says of the running VM into the record. */
  applyHandle(rec: InstanceRecord, h: VmHandle): void {
    rec.ip = h.ip;
    rec.ssh_port = h.ssh_port;
    rec.agent_port = h.agent_port;
    rec.agent_cid = h.agent_cid;
    const live = rec.forwards.filter((f) => f.kind === 'live');
    rec.forwards = [...h.forwards.map((f) => ({ ...f, kind: 'boot' as const, pid: h.pid })), ...live];
    rec.runtime = h.state;
  }

  /** The handle the record describes (for re-attaching), or undefined when it keeps no adapter state. */
  handleOf(rec: InstanceRecord): VmHandle | undefined {
    if (!rec.runtime) return undefined;
    const boot = rec.forwards.filter((f) => f.kind === 'boot');
    return {
      ip: rec.ip, ssh_port: rec.ssh_port, agent_port: rec.agent_port, agent_cid: rec.agent_cid, pid: boot[0]?.pid,
      forwards: boot.map((f) => ({ host_port: f.host_port, guest_port: f.guest_port, proto: f.proto })),
      restored_from_snapshot: false, state: rec.runtime,
    };
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
}
