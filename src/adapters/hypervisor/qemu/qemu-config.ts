import { ConfigError, type Config, type ConfigSection } from '../../../app/config.js';
import { LIMITS } from '../../../domain/create-request.js';
import { LAYERS_RANGE, MAX_LAYERS } from './disk-layers.js';

/** The `qemu:` section of the config (docs/config.md). */
export interface QemuSection {
  binary: string;
  /** When the daemon runs as root, QEMU drops to this user (`-runas`) once its files are open; '' keeps root. */
  user: string;
  accel: 'auto' | 'kvm' | 'tcg';
  /** Keep one QEMU started ahead for the next clone of each recently cloned template (spare-qemus.ts). */
  clone_spares: boolean;
  /** That QEMU restores its guest and runs it through a clone's first calls, then waits paused. */
  clone_spares_warm: boolean;
  mount_driver: '9p' | 'virtiofs';
  /** How the daemon reaches the agent: `tcp` (svc-netd's forward), `vsock` (where the host has vhost-vsock), `auto`. */
  agent_transport: 'auto' | 'tcp' | 'vsock';
  /**
   * The guest NIC's other end: `netd` (svc-netd: the egress policy, the host's loopback closed) or
   * `qemu-user` (QEMU's own user-mode network: no policy, the host's loopback at 10.0.2.2; test_mode only).
   */
  net: 'netd' | 'qemu-user';
  /** Saved states become RAM images clones map copy-on-write (docs/suspend-and-clones.md); false keeps streams. */
  ram_images: boolean;
  /** A memory filesystem's folder RAM images are made in before they are copied beside the VM (ram-staging.ts); '' makes them in place. */
  ram_image_staging: string;
  /** A template's or forked VM's disk chain past this many layers is written back into one (docs/suspend-and-clones.md). */
  max_disk_layers: number;
  /** The most vCPUs one VM may have; 0: this host's CPUs (a create or edit asking for more is 400). */
  max_vm_cpus: number;
}

export const QEMU_SECTION: ConfigSection = {
  name: 'qemu',
  driver: 'qemu',
  keys: {
    binary: ['string', 'qemu-system-x86_64'],
    user: ['string', 'nobody'],
    accel: [{ oneOf: ['auto', 'kvm', 'tcg'] }, 'auto'],
    clone_spares: ['bool', true],
    clone_spares_warm: ['bool', true],
    mount_driver: [{ oneOf: ['9p', 'virtiofs'] }, '9p'],
    agent_transport: [{ oneOf: ['auto', 'tcp', 'vsock'] }, 'auto'],
    net: [{ oneOf: ['netd', 'qemu-user'] }, 'netd'],
    ram_images: ['bool', true],
    ram_image_staging: ['string', '/dev/shm'],
    max_disk_layers: ['int', MAX_LAYERS],
    max_vm_cpus: ['int', 0],
  },
  aliases: {
    qemu_binary: 'binary',
    qemu_user: 'user',
    accel: 'accel',
    clone_spares: 'clone_spares',
    clone_spares_warm: 'clone_spares_warm',
    mount_driver: 'mount_driver',
    agent_transport: 'agent_transport',
    guest_net: 'net',
  },
  check(s, config) {
    const [lo, hi] = LAYERS_RANGE;
    if (typeof s.max_disk_layers === 'number' && (s.max_disk_layers < lo || s.max_disk_layers > hi))
      throw new ConfigError(
        `config key "qemu.max_disk_layers": ${s.max_disk_layers} is out of range; a disk chain may have ${lo} to ${hi} layers before it is flattened`,
      );
    if (typeof s.max_vm_cpus === 'number' && (s.max_vm_cpus < 0 || s.max_vm_cpus > LIMITS.cpus[1]))
      throw new ConfigError(
        `config key "qemu.max_vm_cpus": ${s.max_vm_cpus} is out of range; 0 (this host's CPUs) to ${LIMITS.cpus[1]}`,
      );
    if (s.net === 'qemu-user' && !config.test_mode) {
      throw new ConfigError(
        "config key \"qemu.net\": qemu-user gives guests QEMU's own network, which reaches the host's loopback (the daemon's API, other VMs' agents) and has no egress policy; it is for tests only and needs test_mode: true",
      );
    }
  },
};

export const qemuSection = (config: Config) => config.sections.qemu as unknown as QemuSection;
