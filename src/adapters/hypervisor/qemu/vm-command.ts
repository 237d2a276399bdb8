import type { VmSpec } from '../../../ports/hypervisor.js';
import { freePorts } from '../free-port.js';
import type { Accel } from './accel-probe.js';
import type { ImageCatalog } from '../../images/image-catalog.js';
import { startMounts } from './mounts.js';
import { overlayMac } from '../guest-seed.js';
import { qemuArgs, type GuestNic, type QemuLaunch, type QemuLayout } from './qemu-args.js';
import { layout } from './qemu-files.js';
import { diskFds } from './qemu-spawn.js';

export interface VmCommandOptions {
  images: ImageCatalog;
  mountDriver: '9p' | 'virtiofs';
  overlayMcast?: string;
  qemuUser?: string;
  accelerator: () => Promise<Accel>;
  /** The guest NIC's other end: svc-netd (default) or QEMU's own user-mode network (test_mode). */
  guestNet: 'netd' | 'qemu-user';
}

/**
 * QEMU's command line for a VM spec, from what the daemon was configured with: a launch and the
 * QEMU that makes a VM's RAM image (ram-image.ts) set the same devices up this way.
 */
export class VmCommand {
  constructor(private readonly o: VmCommandOptions) {}

  /**
   * The user QEMU drops to: `qemu_user` when the daemon is root, except for a VM with 9p shares,
   * which QEMU itself serves and which would then be limited to what that user may touch.
   */
  runAs(spec: VmSpec): string | undefined {
    if (!this.o.qemuUser || process.getuid?.() !== 0) return undefined;
    if (spec.mounts.length && this.o.mountDriver === '9p') return undefined;
    return this.o.qemuUser;
  }

  /** Can a loaded guest be given its shares once it runs (9p: yes; virtio-fs: only at boot)? */
  get sharesAfterLoad(): boolean {
    return this.o.mountDriver === '9p';
  }

  /** Can `spec`'s RAM be a file? Not with virtio-fs shares: their RAM is a shared memfd for virtiofsd. */
  ramCanBeFile(spec: VmSpec): boolean {
    return !(spec.mounts.length && this.o.mountDriver === 'virtiofs');
  }

  /**
   * The guest NIC for a QEMU of `spec` about to start: svc-netd's socket in `l`, or with QEMU's own
   * network fresh host ports for SSH, the agent and the spec's forwards (0: picked).
   */
  async nic(spec: VmSpec, l: QemuLayout = layout(spec.dir)): Promise<GuestNic> {
    if (this.o.guestNet === 'netd') return { kind: 'netd', socket: l.net };
    const auto = spec.forwards.filter((f) => !f.host_port);
    const [sshPort, agentPort, ...picked] = await freePorts(
      ['tcp', 'tcp', ...auto.map((f) => f.proto)],
      new Set(spec.forwards.map((f) => f.host_port)),
    );
    return {
      kind: 'qemu-user',
      sshPort,
      agentPort,
      forwards: spec.forwards.map((f) => ({ ...f, host_port: f.host_port || picked.shift()! })),
    };
  }

  get guestNet(): 'netd' | 'qemu-user' {
    return this.o.guestNet;
  }

  /** The command line for `spec`: its NIC as `extra` gives it (else a fresh one), its disk as descriptors, its shares started. */
  async args(spec: VmSpec, extra: Partial<QemuLaunch>): Promise<string[]> {
    const l = extra.layout ?? layout(spec.dir);
    return qemuArgs({
      name: spec.name,
      cpus: spec.cpus,
      memory_mb: spec.memory_mb,
      accel: await this.o.accelerator(),
      image: await this.o.images.get(spec.image, l.disk),
      layout: l,
      nic: extra.nic ?? (await this.nic(spec, l)),
      mounts: await startMounts(spec, this.o.mountDriver),
      mountDriver: this.o.mountDriver,
      diskFds: await diskFds(spec.dir, l.disk),
      overlay:
        spec.overlay_ip && this.o.overlayMcast
          ? { mcast: this.o.overlayMcast, mac: overlayMac(spec.overlay_ip) }
          : undefined,
      runAs: this.runAs(spec),
      ...extra,
    });
  }
}
