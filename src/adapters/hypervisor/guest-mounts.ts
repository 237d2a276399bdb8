import type { Mount } from '../../domain/vm.js';
import { shellWord } from '../process-kit/shell-word.js';

/** How a guest mounts its shares, whatever hypervisor serves them: 9p or virtio-fs, by tag. */
export type MountDriver = '9p' | 'virtiofs';

/** The tag a mount is known by in the guest (`tag`, else mount0, mount1, ...). */
export function mountTag(m: Mount, i: number): string {
  return m.tag ?? `mount${i}`;
}

/** The guest script (seed `mounts.sh`) that mounts each share at boot. */
export function mountScript(mounts: Mount[], driver: MountDriver): string {
  const lines = [
    '#!/bin/sh',
    '# svc mounts, run by the guest init at boot',
    driver === '9p' ? 'modprobe -q 9pnet_virtio; modprobe -q 9p' : 'modprobe -q virtiofs',
  ];
  for (const [i, m] of mounts.entries()) {
    const tag = mountTag(m, i);
    const ro = m.readonly ? ',ro' : '';
    const guest = shellWord(m.guest);
    lines.push(`mkdir -p ${guest}`);
    lines.push(
      driver === '9p'
        ? `mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144${ro} ${tag} ${guest}`
        : `mount -t virtiofs -o ${m.readonly ? 'ro' : 'rw'} ${tag} ${guest}`,
    );
  }
  return lines.join('\n') + '\n';
}

/** The same mounts as cloud-init `mounts` (vendor-data), so stock cloud images mount them too. */
export function cloudInitMounts(mounts: Mount[], driver: MountDriver): string {
  const entries = mounts.map((m, i) => {
    const opts =
      driver === '9p' ? `trans=virtio,version=9p2000.L${m.readonly ? ',ro' : ''}` : m.readonly ? 'ro' : 'defaults';
    return `  - [${mountTag(m, i)}, ${JSON.stringify(m.guest)}, ${driver}, "${opts},nofail", "0", "0"]`;
  });
  return `#cloud-config\nmounts:\n${entries.join('\n')}\n`;
}
