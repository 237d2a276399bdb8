import { existsSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { InvalidArgumentError, NotSupportedError } from '../../domain/errors.js';
import type { Mount } from '../../domain/instance.js';

export const VIRTIOFSD_PATHS = ['/usr/lib/qemu/virtiofsd', '/usr/libexec/virtiofsd', '/usr/bin/virtiofsd'];

export function virtiofsd(): string | undefined {
  return VIRTIOFSD_PATHS.find((p) => existsSync(p));
}

/** The tag a mount is known by in the guest (`tag`, else mount0, mount1, ...). */
export function mountTag(m: Mount, i: number): string {
  return m.tag ?? `mount${i}`;
}

/** Host side of mount validation: every host path must be an existing directory. */
export async function checkHostDirs(mounts: Mount[]): Promise<void> {
  for (const [i, m] of mounts.entries()) {
    const st = await stat(m.host).catch(() => undefined);
    if (!st?.isDirectory()) throw new InvalidArgumentError(`mounts[${i}].host: ${m.host} is not an existing directory`);
  }
}

export function checkDriver(driver: '9p' | 'virtiofs'): void {
  if (driver === 'virtiofs' && !virtiofsd()) {
    throw new NotSupportedError(`mount_driver virtiofs: virtiofsd is not installed (looked in ${VIRTIOFSD_PATHS.join(', ')}); install qemu-system-common or use mount_driver: 9p`);
  }
}

/** The guest script (seed `mounts.sh`) that mounts each share at boot. */
export function mountScript(mounts: Mount[], driver: '9p' | 'virtiofs'): string {
  const lines = ['#!/bin/sh', '# svc mounts, run by the guest init at boot', driver === '9p' ? 'modprobe -q 9pnet_virtio; modprobe -q 9p' : 'modprobe -q virtiofs'];
  for (const [i, m] of mounts.entries()) {
    const tag = mountTag(m, i);
    const ro = m.readonly ? ',ro' : '';
    lines.push(`mkdir -p '${m.guest}'`);
    lines.push(driver === '9p'
      ? `mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144${ro} ${tag} '${m.guest}'`
      : `mount -t virtiofs -o ${m.readonly ? 'ro' : 'rw'} ${tag} '${m.guest}'`);
  }
  return lines.join('\n') + '\n';
}

/** The same mounts as cloud-init `mounts` (vendor-data), so stock cloud images mount them too. */
export function cloudInitMounts(mounts: Mount[], driver: '9p' | 'virtiofs'): string {
  const entries = mounts.map((m, i) => {
    const opts = driver === '9p' ? `trans=virtio,version=9p2000.L${m.readonly ? ',ro' : ''}` : (m.readonly ? 'ro' : 'defaults');
    return `  - [${mountTag(m, i)}, "${m.guest}", ${driver}, "${opts},nofail", "0", "0"]`;
  });
  return `#cloud-config\nmounts:\n${entries.join('\n')}\n`;
}
