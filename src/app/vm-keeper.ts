import { inject, injectable, optional } from 'inversify';
import { asDomainError, errorMessage, isNoSpace } from '../domain/errors.js';
import { changeStatus, clearRuntime, type VmRecord, type PortForward } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import { Failpoints } from '../ports/failpoints.js';
import type { VmHandle, VmRef, VmSpec } from '../ports/hypervisor.js';
import { bootEntrypoint, type ProcessStart } from '../domain/processes.js';
import { Hypervisor } from '../ports/hypervisor.js';
import { GuestImages } from '../ports/guest-images.js';
import { Logger } from '../ports/logger.js';
import { ConsoleLogs, VmStore } from '../ports/stores.js';
import { SshKeys } from '../ports/tunnels.js';
import type { Config } from './config.js';
import { withConsoleTail } from './console-tail.js';
import { CrashWatch } from './crash-watch.js';
import { GuestReadiness } from './guest-readiness.js';
import { LifecycleEvents } from './lifecycle-events.js';
import { AppConfig } from './tokens.js';
import { Vms } from './vms.js';

/**
 * What lifecycle and creation both do to one VM: turn its record into a hypervisor spec and take
 * the hypervisor's handle back into it, boot it and wait for its guest, and remove every trace of it.
 */
@injectable()
export class VmKeeper {
  constructor(
    @inject(AppConfig) private readonly config: Config,
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(GuestImages) private readonly images: GuestImages,
    @inject(SshKeys) private readonly keys: SshKeys,
    @inject(VmStore) private readonly store: VmStore,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
    @inject(LifecycleEvents) private readonly events: LifecycleEvents,
    @inject(Vms) private readonly vms: Vms,
    @inject(Failpoints) private readonly failpoints: Failpoints,
    @inject(GuestReadiness) private readonly readiness: GuestReadiness,
    @inject(CrashWatch) private readonly crashes: CrashWatch,
    @inject(ConsoleLogs) @optional() private readonly consoles: ConsoleLogs | undefined,
  ) {}

  /**
   * Boots a stopped, suspended or failed VM (start, restore) and waits for its guest; on failure
   * the process is killed and the VM is left `error`, and the error is thrown. A restore that
   * cold-booted instead (its guest's processes ended) resolves with why. A restore `paused` whose
   * state loaded leaves the guest paused, not waited for: it wakes at its resume (`wake`).
   */
  async boot(rec: VmRecord, restore: boolean, paused = false): Promise<string | undefined> {
    const spec = await this.bootSpec(rec);
    const handle = await this.hv.launch(spec, { restore, paused });
    if (restore) this.failpoints.hit('restore.launched');
    this.applyHandle(rec, handle);
    const held = paused && handle.restored_from_snapshot;
    changeStatus(rec, { to: held ? 'paused' : 'running' });
    if (held) rec.wake_at_resume = true;
    // A guest that woke mounts its folders once it answers (guest-readiness.ts): a daemon that dies
    // before then gives them at its start (guest-shares.ts).
    else if (handle.restored_from_snapshot && rec.mounts.length) rec.shares_out = true;
    await this.vms.save(rec);
    if (restore) this.failpoints.hit('restore.running');
    if (!held) await this.awaitGuest(rec, handle.restored_from_snapshot, handle.pid, spec);
    await this.events.emit('up', rec);
    return restore ? coldBootReason(handle) : undefined;
  }

  /**
   * The wake of a guest restored paused (`wake_at_resume`), its CPUs just resumed: what a restore
   * does as its guest wakes (its folders, its clock, the readiness wait), and as a restore fails.
   */
  async wake(rec: VmRecord): Promise<void> {
    if (rec.mounts.length) rec.shares_out = true;
    await this.vms.save(rec);
    await this.awaitGuest(rec, true, rec.pid);
  }

  /**
   * Waits for the guest of a VM just booted or restored; one that never comes up is killed, and the
   * VM left `error`. A cold boot that hangs is booted again from `spec` (made then when not given:
   * a restored guest is never booted again).
   */
  private async awaitGuest(rec: VmRecord, restored: boolean, pid: number | undefined, spec?: VmSpec): Promise<void> {
    const image = await this.images.resolveImage(rec.image).catch(() => ({ agent_ready: false, ssh_user: 'root' }));
    try {
      await this.readiness.awaitReady(
        rec,
        GuestReadiness.waitFor('auto', image),
        this.clock.now() + this.config.ready_timeout_ms,
        () => undefined,
        image,
        restored ? { fresh: false, restored: true } : undefined,
        { pid, again: async () => this.bootAgain(rec, spec ?? (await this.bootSpec(rec))) },
      );
    } catch (err) {
      // What the console said last goes with the error (a guest that never came up says why).
      const told = await withConsoleTail(
        this.consoles,
        rec,
        asDomainError(err),
        `the whole console: svc logs ${rec.name}`,
      );
      await this.hv.kill(this.ref(rec)).catch(() => undefined);
      changeStatus(rec, { to: 'error', error: errorMessage(err) });
      clearRuntime(rec);
      await this.vms.save(rec);
      throw told;
    }
  }

  /**
   * Kills the VM's QEMU and boots it cold again from `spec` (a guest that hung while it booted:
   * guest-readiness.ts); answers the new process's pid.
   */
  async bootAgain(rec: VmRecord, spec: VmSpec): Promise<number | undefined> {
    await this.crashes.expectExit(rec, () => this.hv.kill(this.ref(rec)));
    const handle = await this.hv.launch(spec, { restore: false });
    this.applyHandle(rec, handle);
    await this.vms.save(rec);
    return handle.pid;
  }

  /** Removes every trace of a VM: process, disk, directory, record. With keepLogs, logs survive. */
  async purge(rec: VmRecord, keepLogs = false): Promise<void> {
    // Intent first: from here on a crash leaves a record that says to finish the delete.
    if (rec.status !== 'creating' && !rec.deleting) {
      rec.deleting = true;
      await this.vms.save(rec).catch((err: unknown) => {
        // A full disk is often why a VM goes: the delete goes on without its intent on disk (a
        // crash within it leaves the VM for a second delete, or as the hypervisor left it).
        if (!isNoSpace(err)) throw err;
        this.log.warn({ vm: rec.name, err: errorMessage(err) }, 'no room to record the delete; deleting without it');
      });
    }
    await this.events.emit('removed', rec);
    await this.crashes
      .expectExit(rec, () => this.hv.destroy(this.ref(rec)))
      .catch((err) => this.log.error({ vm: rec.name, err: errorMessage(err) }, 'hypervisor destroy failed'));
    this.failpoints.hit('delete.destroyed');
    if (keepLogs) await this.store.keepLogs(rec.name).catch(() => undefined);
    await this.store.remove(rec.name);
    this.vms.forget(rec.name);
    this.crashes.forget(rec.name);
  }

  /** The hypervisor's view of the VM, with these boot forwards and the daemon's SSH key. */
  async spec(rec: VmRecord, forwards: PortForward[]): Promise<VmSpec> {
    return {
      name: rec.name,
      dir: this.store.dir(rec.name),
      cpus: rec.cpus,
      memory_mb: rec.memory_mb,
      disk_gb: rec.disk_gb,
      image: rec.image,
      hostname: rec.name,
      userdata: rec.userdata,
      mounts: rec.mounts,
      overlay_ip: rec.overlay_ip,
      egress: rec.egress,
      entrypoint: await this.entrypoint(rec),
      forwards: forwards.map((f) => ({ host_port: f.host_port, guest_port: f.guest_port, proto: f.proto })),
      ssh_authorized_key: await this.keys.publicKey(),
    };
  }

  /** What the VM's guest starts at a cold boot: its image's entrypoint as its create said (none, or with a restart policy). */
  private async entrypoint(rec: VmRecord): Promise<ProcessStart | undefined> {
    if (rec.entrypoint === false) return undefined;
    // An image that cannot be read fails the boot in the adapter, which says why.
    return bootEntrypoint(
      (await this.images.resolveImage(rec.image).catch(() => undefined))?.entrypoint,
      rec.entrypoint,
    );
  }

  /** What a start launches: the record's VM with its boot forwards (those added live are added again after). */
  bootSpec(rec: VmRecord): Promise<VmSpec> {
    return this.spec(
      rec,
      rec.forwards.filter((f) => f.kind === 'boot'),
    );
  }

  /** Takes what the hypervisor says of the running VM into the record. */
  applyHandle(rec: VmRecord, h: VmHandle): void {
    rec.ip = h.ip;
    rec.ssh_port = h.ssh_port;
    rec.agent_port = h.agent_port;
    rec.agent_cid = h.agent_cid;
    if (h.agent_socket) rec.agent_socket = h.agent_socket;
    else delete rec.agent_socket;
    if (h.pid) rec.pid = h.pid;
    else delete rec.pid;
    const live = rec.forwards.filter((f) => f.kind === 'live');
    rec.forwards = [...h.forwards.map((f) => ({ ...f })), ...live];
    rec.runtime = h.state;
  }

  /** The handle the record describes (for re-attaching), or undefined when it keeps no adapter state. */
  handleOf(rec: VmRecord): VmHandle | undefined {
    if (!rec.runtime) return undefined;
    return {
      ip: rec.ip,
      ssh_port: rec.ssh_port,
      agent_port: rec.agent_port,
      agent_cid: rec.agent_cid,
      agent_socket: rec.agent_socket,
      pid: rec.pid,
      forwards: rec.forwards.filter((f) => f.kind === 'boot').map((f) => ({ ...f })),
      restored_from_snapshot: false,
      state: rec.runtime,
    };
  }

  ref(rec: VmRecord): VmRef {
    return { name: rec.name, dir: this.store.dir(rec.name) };
  }
}

/** Why a launch asked to restore came up cold-booted (its guest's processes gone); undefined when it restored. */
export function coldBootReason(handle: VmHandle): string | undefined {
  if (handle.restored_from_snapshot) return undefined;
  return handle.cold_boot_reason ?? 'there was no saved state to load';
}
