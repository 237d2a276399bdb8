import type { Accel } from './accel-probe.js';
import type { ResolvedImage } from '../../images/image-catalog.js';
import { mountTag, type Mount } from '../../../domain/vm.js';

export interface QemuLayout {
  dir: string;
  disk: string;
  seed: string;
  qmp: string;
  /** Where QEMU listens for svc-netd, the guest NIC's other end (`-netdev stream`). */
  net: string;
  serial: string;
  pidfile: string;
}

/**
 * The other end of the guest's NIC: svc-netd over a stream socket QEMU listens on (the default,
 * docs/network.md), or QEMU's own user-mode network with host forwards on its command line
 * (`guest_net: qemu-user`, test_mode only: it has no egress policy and maps 10.0.2.2 to the host's
 * loopback).
 */
export type GuestNic =
  | { kind: 'netd'; socket: string }
  | {
      kind: 'qemu-user';
      sshPort: number;
      agentPort: number;
      forwards: { host_port: number; guest_port: number; proto: 'tcp' | 'udp' }[];
    };

export interface QemuLaunch {
  name: string;
  cpus: number;
  memory_mb: number;
  accel: Accel;
  image: ResolvedImage;
  layout: QemuLayout;
  nic: GuestNic;
  /** Legacy restore: the internal qcow2 snapshot of that name (`-loadvm`). */
  loadSnapshot?: string;
  /**
   * The disk as inherited descriptors (a read-write and a read-only one, `-add-fd`): QEMU that
   * dropped to another user cannot open the disk by its path again, and suspending (migration)
   * reopens it read-only. `backing` is the disk's backing file by its full path, since a relative
   * name would resolve against /dev/fdset.
   */
  diskFds?: { rw: number; ro: number; backing?: string };
  /** Restore: the saved migration stream arrives on this inherited descriptor (`-incoming fd:N`). */
  incomingFd?: number;
  /**
   * The guest's RAM as a file (a RAM image, ram-image.ts) instead of anonymous memory: `shared`
   * writes go to the file (making an image), else the file is mapped copy-on-write (restoring one:
   * every VM restored from it shares its unchanged pages). Not with virtio-fs shares.
   */
  ramFile?: { path: string; shared: boolean };
  /**
   * `-incoming defer`: the load is started over QMP (`migrate-incoming fd:<incomingFd>`) once the
   * capabilities a RAM image's device state needs are set.
   */
  incomingDefer?: boolean;
  vsockCid?: number;
  /** Shares: 9p (`-virtfs`) or virtio-fs (a virtiofsd socket each, and shared guest RAM). */
  mounts?: { tag: string; host: string; readonly: boolean; socket?: string }[];
  mountDriver?: '9p' | 'virtiofs';
  /** A second NIC on the overlay segment: multicast group:port and a per-VM MAC. */
  overlay?: { mcast: string; mac: string };
  /** Drop to this user once QEMU has opened its files (`-runas`; the daemon runs as root). */
  runAs?: string;
}

/** The process name QEMU runs under; re-attach checks it, so a recycled pid is not taken for a VM. */
export function processTag(name: string): string {
  return `svc-${name}`;
}

/**
 * TCG's buffer of translated guest code, in MiB. QEMU 7.2 reserves 1 GiB by default and fills it
 * as a guest runs new code: a debian guest of 512 MB had a QEMU of 1.05-1.12 GiB (and growing)
 * after its boot and three rounds of python, dpkg and apt-cache; with 256 the same was 785 MiB and
 * flat, as fast (docs/qemu.md). Smaller buffers cost time on such work (128: up to a third
 * slower in one round; 64: boots 20% slower).
 */
export const TCG_TB_MB = 256;

/** The guest NIC's MAC (QEMU's default for the first one, which images and saved guests already have). */
export const GUEST_MAC = '52:54:00:12:34:56';

/**
 * The MTU the guest's NIC tells its driver when svc-netd is the other end (virtio's `host_mtu`):
 * the link is a socket between two processes on one host, so a frame can be as large as QEMU's
 * stream takes (its buffer is 68 KiB) and IPv4 allows, and a guest then sends 64 KB TCP segments,
 * not 1.5 KB ones: a 45th of the packets, interrupts and svc-netd turns per byte (docs/qemu.md).
 * A guest saved under the 1500 of before keeps it when restored: it did not take the feature.
 */
export const NETD_MTU = 65520;

/** The disk option a VM needs to be captured for forks (vm-capture.ts checks a running QEMU for it). */
export const UNLOCKED = 'file.locking=off';

/** A path inside a QEMU option string: commas are doubled. */
const optPath = (p: string) => p.replace(/,/g, ',,');

function disk(l: QemuLaunch): string[] {
  // No image locks: QEMU 7.2 cannot take them back on a disk given as two descriptors once a
  // migration has let go of it, so a VM captured for forks (vm-capture.ts) could not run on. The
  // daemon itself keeps one QEMU per disk (and kills a stray one before a start: qemu-files.ts).
  const opts = `if=virtio,format=qcow2,cache=writeback,discard=unmap,${UNLOCKED}`;
  if (!l.diskFds) return ['-drive', `file=${optPath(l.layout.disk)},${opts}`];
  const { rw, ro, backing } = l.diskFds;
  return [
    // The path rides along as the set's note: re-attach finds the VM's disk on QEMU's command line.
    '-add-fd',
    `fd=${rw},set=1,opaque=${optPath(l.layout.disk)}`,
    '-add-fd',
    `fd=${ro},set=1`,
    '-drive',
    `file=/dev/fdset/1,${opts}${backing ? `,backing.file.filename=${optPath(backing)},backing.driver=qcow2` : ''}`,
  ];
}

/** Does this QEMU load a saved guest (a stream, a RAM image, an old internal snapshot) rather than boot one? */
function loadsGuest(l: Pick<QemuLaunch, 'incomingFd' | 'loadSnapshot'>): boolean {
  return l.incomingFd !== undefined || !!l.loadSnapshot;
}

/**
 * The 9p devices (QMP `device_add` arguments) a loaded guest's shares are added as once it runs,
 * each over the backend `fs<i>` its command line named. The guest sees them hot-plugged (ACPI, the
 * `pc` machine's root bus) and mounts them when told (guest-mounts.ts `addedMountScript`).
 */
export function sharesToAdd(mounts: Mount[]): Record<string, string>[] {
  return mounts.map((m, i) => shareDevice(mountTag(m, i), i));
}

/** The `i`th share's 9p device, tagged `tag`: on a booted guest's command line, or plugged into a loaded one. */
function shareDevice(tag: string, i: number): Record<string, string> {
  return { driver: 'virtio-9p-pci', id: shareId(i), fsdev: `fs${i}`, mount_tag: tag, addr: shareSlot(i) };
}

/**
 * The PCI slot of a VM's `i`th share, from 0x10 up (at most 16 shares: create-request.ts): apart
 * from the slots QEMU gives the other devices in order, so a guest booted with shares has those
 * where a guest booted without them has them, and a saved state of either loads into the other
 * with its shares unplugged (QEMU checks each device's slot).
 */
function shareSlot(i: number): string {
  return `0x${(0x10 + i).toString(16)}`;
}

/** The QEMU id of a VM's `i`th share device, whether it booted with it or was given it. */
export function shareId(i: number): string {
  return `share${i}`;
}

function netdev(nic: GuestNic): string {
  // server=on: QEMU listens, svc-netd connects, and connects again after a restart of its own.
  if (nic.kind === 'netd') return `stream,id=net0,server=on,addr.type=unix,addr.path=${optPath(nic.socket)}`;
  const fwd = [
    `hostfwd=tcp:127.0.0.1:${nic.sshPort}-:22`,
    `hostfwd=tcp:127.0.0.1:${nic.agentPort}-:7475`,
    ...nic.forwards.map((f) => `hostfwd=${f.proto}:127.0.0.1:${f.host_port}-:${f.guest_port}`),
  ];
  return `user,id=net0,${fwd.join(',')}`;
}

/**
 * The command line of a kernel QEMU boots: the image's, with `no_timer_check`. At boot a kernel
 * checks that the timer interrupt comes within a few ticks of a busy loop; under TCG on a busy host
 * it may come late, and the kernel then reroutes the timer (`..MP-BIOS bug: 8254 timer not connected
 * to IO-APIC`) and can hang for good (seen in CI). Linux skips the check itself in the guests it
 * recognises (KVM, VMware, Hyper-V set `no_timer_check`); a TCG guest it cannot recognise is told.
 */
export function kernelCmdline(cmdline: string): string {
  return /(^|\s)no_timer_check(\s|$)/.test(cmdline) ? cmdline : `${cmdline} no_timer_check`.trim();
}

/** The QEMU command line for one VM. Pure, so it is unit-tested; every path comes from the layout. */
export function qemuArgs(l: QemuLaunch): string[] {
  const args = [
    '-name',
    `${processTag(l.name)},process=${processTag(l.name)}`,
    '-machine',
    'pc',
    '-accel',
    l.accel === 'tcg' ? `tcg,tb-size=${TCG_TB_MB}` : l.accel,
    '-cpu',
    l.accel === 'kvm' ? 'host' : 'max',
    '-smp',
    String(l.cpus),
    '-m',
    String(l.memory_mb),
    '-nodefaults',
    '-display',
    'none',
    '-no-reboot',
    '-no-user-config',
    // seccomp: a guest that breaks into QEMU cannot exec or use obsolete syscalls, nor setuid; with
    // -runas the filter must let QEMU drop to the user itself, after which setuid cannot gain anything.
    '-sandbox',
    `on,obsolete=deny,elevateprivileges=${l.runAs ? 'allow' : 'deny'},spawn=deny,resourcecontrol=deny`,
    ...(l.runAs ? ['-runas', l.runAs] : []),
    // The project's images boot its kernel directly; an imported disk boots its own bootloader.
    ...(l.image.boot === 'firmware'
      ? []
      : [
          '-kernel',
          `${l.image.dir}/${l.image.kernel}`,
          ...(l.image.initrd ? ['-initrd', `${l.image.dir}/${l.image.initrd}`] : []),
          '-append',
          kernelCmdline(l.image.cmdline),
        ]),
    ...disk(l),
    '-drive',
    `file=${l.layout.seed},if=virtio,format=raw,readonly=on`,
    // The MAC is QEMU's default for a first NIC, named so svc-netd and a saved guest's ARP cache agree.
    '-netdev',
    netdev(l.nic),
    '-device',
    `virtio-net-pci,netdev=net0,mac=${GUEST_MAC}${l.nic.kind === 'netd' ? `,host_mtu=${NETD_MTU}` : ''}`,
    '-device',
    'virtio-rng-pci',
    // append=on: the daemon caps the log by copying it aside and truncating it in place.
    '-chardev',
    `file,id=serial0,path=${l.layout.serial},append=on`,
    '-serial',
    'chardev:serial0',
    '-qmp',
    `unix:${l.layout.qmp},server=on,wait=off`,
    '-pidfile',
    l.layout.pidfile,
  ];
  if (l.overlay) {
    args.push(
      '-netdev',
      `socket,id=overlay0,mcast=${l.overlay.mcast},localaddr=127.0.0.1`,
      '-device',
      `virtio-net-pci,netdev=overlay0,mac=${l.overlay.mac}`,
    );
  }
  const mounts = l.mounts ?? [];
  if (mounts.length && l.mountDriver === 'virtiofs') {
    // vhost-user-fs needs the guest RAM in a shared memory backend.
    args.push('-object', `memory-backend-memfd,id=mem,size=${l.memory_mb}M,share=on`, '-numa', 'node,memdev=mem');
    mounts.forEach((m, i) =>
      args.push(
        '-chardev',
        `socket,id=vfs${i},path=${m.socket}`,
        '-device',
        `vhost-user-fs-pci,chardev=vfs${i},tag=${m.tag}`,
      ),
    );
  } else {
    // Paths and tags were validated: no commas reach these option strings. A saved state has no
    // share in it (a guest's shares are let go before it is saved): a loaded guest's devices are
    // added once it runs (sharesToAdd) over the backends named here; a booted one has them now,
    // with the ids a suspend unplugs them by.
    const loaded = loadsGuest(l);
    mounts.forEach((m, i) => {
      args.push('-fsdev', `local,path=${m.host},security_model=none,id=fs${i}${m.readonly ? ',readonly=on' : ''}`);
      if (!loaded) {
        const { driver, ...props } = shareDevice(m.tag, i);
        args.push('-device', [driver, ...Object.entries(props).map(([k, v]) => `${k}=${v}`)].join(','));
      }
    });
  }
  if (l.vsockCid) args.push('-device', `vhost-vsock-pci,guest-cid=${l.vsockCid}`);
  if (l.loadSnapshot) args.push('-loadvm', l.loadSnapshot);
  if (l.ramFile) {
    // The id matches the RAM block of a plain `-m` (pc.ram), so a stream saved without the file loads into it.
    args.push(
      '-object',
      `memory-backend-file,id=pc.ram,size=${l.memory_mb}M,mem-path=${optPath(l.ramFile.path)},share=${l.ramFile.shared ? 'on' : 'off'}`,
      '-machine',
      'memory-backend=pc.ram',
    );
  }
  // -S: a loaded guest (a stream, a RAM image, an old internal snapshot) waits for the daemon's
  // `cont`, whatever state it was saved in, which comes once its network is attached: QEMU 7.2
  // running a restored guest before then segfaults, sending its queued packets into a stream
  // netdev with no channel yet (docs/forks.md).
  if (l.incomingFd !== undefined || l.loadSnapshot) args.push('-S');
  if (l.incomingFd !== undefined) args.push('-incoming', l.incomingDefer ? 'defer' : `fd:${l.incomingFd}`);
  return args;
}
