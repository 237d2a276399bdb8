import { join } from 'node:path';
import type { VmSpec } from '../../../ports/hypervisor.js';
import type { ResolvedImage } from '../../images/image-catalog.js';

/** The guest port the agent listens on, over vsock too. */
export const AGENT_VSOCK_PORT = 7475;
/**
 * The guest's vsock context id. With hybrid vsock the host side is a Unix socket per VM, so every
 * guest may have the same one (the agent listens on any).
 */
export const GUEST_CID = 3;

/** Where a Cloud Hypervisor VM's files are, in its directory. */
export interface ChLayout {
  dir: string;
  disk: string;
  seed: string;
  /** The VMM's REST API (`--api-socket`). */
  api: string;
  /** Hybrid vsock: the host's end of the guest's vsock device. */
  vsock: string;
  serial: string;
  /** `cloud-hypervisor`'s own output. */
  log: string;
  pidfile: string;
  /** A finished snapshot (config.json, state.json, memory-ranges), written as `.tmp` then renamed. */
  snapshot: string;
}

export function chLayout(dir: string): ChLayout {
  return {
    dir,
    disk: join(dir, 'disk.qcow2'),
    seed: join(dir, 'seed.iso'),
    api: join(dir, 'ch-api.sock'),
    vsock: join(dir, 'vsock.sock'),
    serial: join(dir, 'serial.log'),
    log: join(dir, 'ch.log'),
    pidfile: join(dir, 'ch.pid'),
    snapshot: join(dir, 'snapshot'),
  };
}

/**
 * The VmConfig of `vm.create` (Cloud Hypervisor's REST API) for a spec: the image's kernel booted
 * directly with its initramfs and command line, the VM's overlay and its NoCloud seed as disks, a
 * hardware RNG, the serial console to a file, and a vsock device whose host end is a Unix socket
 * (hybrid vsock: how the daemon reaches the agent). No network device: this driver's guests have
 * none (docs/cloud-hypervisor.md). Pure, so it is unit-tested.
 */
export function vmConfig(
  spec: Pick<VmSpec, 'cpus' | 'memory_mb'>,
  img: Pick<ResolvedImage, 'dir' | 'kernel' | 'initrd' | 'cmdline'>,
  l: ChLayout,
): Record<string, unknown> {
  return {
    cpus: { boot_vcpus: spec.cpus, max_vcpus: spec.cpus },
    memory: { size: spec.memory_mb * 1024 * 1024 },
    payload: {
      kernel: join(img.dir, img.kernel),
      ...(img.initrd ? { initramfs: join(img.dir, img.initrd) } : {}),
      cmdline: img.cmdline,
    },
    disks: [
      { path: l.disk, image_type: 'Qcow2' },
      { path: l.seed, readonly: true, image_type: 'Raw' },
    ],
    rng: { src: '/dev/urandom' },
    serial: { mode: 'File', file: l.serial },
    console: { mode: 'Off' },
    vsock: { cid: GUEST_CID, socket: l.vsock },
  };
}

/**
 * A snapshot's config.json moved to another VM's directory: every path that named the old one
 * names the new one (Cloud Hypervisor restores from the paths the snapshot holds).
 */
export function rehome(configJson: string, from: string, to: string): string {
  const config = JSON.parse(configJson) as Record<string, unknown>;
  const swap = (v: unknown): unknown => {
    if (typeof v === 'string') return v === from || v.startsWith(`${from}/`) ? to + v.slice(from.length) : v;
    if (Array.isArray(v)) return v.map(swap);
    if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, swap(x)]));
    return v;
  };
  return JSON.stringify(swap(config));
}
