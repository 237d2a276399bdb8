import type { Accel } from './accel-probe.js';
import type { ResolvedImage } from './image-catalog.js';

export interface QemuLayout {
  dir: string;
  disk: string;
  seed: string;
  qmp: string;
  serial: string;
  pidfile: string;
}

export interface QemuLaunch {
  name: string;
  cpus: number;
  memory_mb: number;
  accel: Accel;
  image: ResolvedImage;
  layout: QemuLayout;
  sshPort: number;
  agentPort: number;
  forwards: { host_port: number; guest_port: number; proto: 'tcp' | 'udp' }[];
  loadSnapshot?: string;
  vsockCid?: number;
}

/** The process name QEMU runs under; re-attach checks it, so a recycled pid is not taken for a VM. */
export function processTag(name: string): string {
  return `svc-${name}`;
}

/** The QEMU command line for one VM. Pure, so it is unit-tested; every path comes from the layout. */
export function qemuArgs(l: QemuLaunch): string[] {
  const fwd = [
    `hostfwd=tcp:127.0.0.1:${l.sshPort}-:22`,
    `hostfwd=tcp:127.0.0.1:${l.agentPort}-:7475`,
    ...l.forwards.map((f) => `hostfwd=${f.proto}:127.0.0.1:${f.host_port}-:${f.guest_port}`),
  ];
  const args = [
    '-name', `${processTag(l.name)},process=${processTag(l.name)}`,
    '-machine', 'pc', '-accel', l.accel, '-cpu', l.accel === 'kvm' ? 'host' : 'max',
    '-smp', String(l.cpus), '-m', String(l.memory_mb),
    '-nodefaults', '-display', 'none', '-no-reboot', '-no-user-config',
    '-kernel', `${l.image.dir}/${l.image.kernel}`,
    ...(l.image.initrd ? ['-initrd', `${l.image.dir}/${l.image.initrd}`] : []),
    '-append', l.image.cmdline,
    '-drive', `file=${l.layout.disk},if=virtio,format=qcow2,cache=writeback,discard=unmap`,
    '-drive', `file=${l.layout.seed},if=virtio,format=raw,readonly=on`,
    '-netdev', `user,id=net0,${fwd.join(',')}`, '-device', 'virtio-net-pci,netdev=net0',
    '-device', 'virtio-rng-pci',
    '-serial', `file:${l.layout.serial}`,
    '-qmp', `unix:${l.layout.qmp},server=on,wait=off`,
    '-pidfile', l.layout.pidfile,
  ];
  if (l.vsockCid) args.push('-device', `vhost-vsock-pci,guest-cid=${l.vsockCid}`);
  if (l.loadSnapshot) args.push('-loadvm', l.loadSnapshot);
  return args;
}
