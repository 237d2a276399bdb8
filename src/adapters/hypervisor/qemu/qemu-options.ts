import type { Failpoints } from '../../../ports/failpoints.js';
import type { Logger } from '../../../ports/logger.js';
import type { ImageCatalog } from '../../images/image-catalog.js';
import type { ImageBases } from './image-bases.js';
import type { NetdGuestNetwork } from '../../guest-net/netd-guest-network.js';

/** What the QEMU adapter (qemu-hypervisor.ts) is built with: the daemon's `qemu` config, resolved. */
export interface QemuOptions {
  qemuBinary: string;
  accel: 'auto' | 'kvm' | 'tcg';
  images: ImageCatalog;
  log: Logger;
  /** Use a vhost-vsock device when the host has /dev/vhost-vsock (agent_transport auto|vsock). */
  vsock: boolean;
  mountDriver: '9p' | 'virtiofs';
  /** The overlay segment's multicast group:port (network: overlay); absent in user mode. */
  overlayMcast?: string;
  /** Each VM's serial, QEMU and virtiofsd log is kept under this (plus one older copy). */
  logMaxBytes?: number;
  /** When the daemon is root, QEMU drops to this user after opening its files (empty: it stays root). */
  qemuUser?: string;
  /** Steps inside the adapter where a test may make the daemon die (`suspend.streaming`, `suspend.image`, `fork.switchover`). */
  failpoints?: Failpoints;
  /** Start a QEMU ahead for the next clone of a template once it was cloned (spare-qemus.ts); default true. */
  spares?: boolean;
  /** That QEMU restores its guest and runs it through the warm-up calls before it waits; default true. */
  sparesWarm?: boolean;
  /** Saved states become RAM images (ram-image.ts); false keeps migration streams (the benchmarks' other half). Default true. */
  ramImages?: boolean;
  /**
   * Make RAM images in a folder of this daemon's under `root` (a memory filesystem: /dev/shm) and
   * copy them beside the VM after (ram-staging.ts; `qemu.ram_image_staging`); `tag` names this
   * data dir's folders. None: made in place.
   */
  ramStaging?: { root: string; tag: string };
  /** A disk chain past this many layers is put back on one (disk-layers.ts, live-flatten.ts); default MAX_LAYERS. */
  maxDiskLayers?: number;
  /** The most vCPUs one VM may have (Hypervisor.maxCpus); unset: this host's CPUs. */
  maxVmCpus?: number;
  /**
   * The guests' networks in svc-netd (docs/network.md); without it guests get QEMU's own user-mode
   * network (`guest_net: qemu-user`, test_mode only: no egress policy, the host's loopback open).
   */
  network?: NetdGuestNetwork;
  /**
   * The record of the image files VMs' disks stand on (image-bases.ts): with it, a VM whose image
   * folder moved is put on the same file at its new path when it starts. None: not recorded.
   */
  imageBases?: ImageBases;
}
