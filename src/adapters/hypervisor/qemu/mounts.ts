import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync } from 'node:fs';
import { unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { InternalError, NotSupportedError } from '../../../domain/errors.js';
import type { Mount } from '../../../domain/instance.js';
import type { VmSpec } from '../../../ports/hypervisor.js';
import { tail } from './qemu-files.js';
import { childEnv } from '../../process-kit/child-env.js';
import { shellWord } from '../../process-kit/shell-word.js';

export const VIRTIOFSD_PATHS = ['/usr/lib/qemu/virtiofsd', '/usr/libexec/virtiofsd', '/usr/bin/virtiofsd'];

export function virtiofsd(): string | undefined {
  return VIRTIOFSD_PATHS.find((p) => existsSync(p));
}

/** The tag a mount is known by in the guest (`tag`, else mount0, mount1, ...). */
export function mountTag(m: Mount, i: number): string {
  return m.tag ?? `mount${i}`;
}

/** Host side of mount validation: every host path must be an existing directory. */
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
    const guest = shellWord(m.guest);
    lines.push(`mkdir -p ${guest}`);
    lines.push(driver === '9p'
      ? `mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144${ro} ${tag} ${guest}`
      : `mount -t virtiofs -o ${m.readonly ? 'ro' : 'rw'} ${tag} ${guest}`);
  }
  return lines.join('\n') + '\n';
}

/** The same mounts as cloud-init `mounts` (vendor-data), so stock cloud images mount them too. */
export function cloudInitMounts(mounts: Mount[], driver: '9p' | 'virtiofs'): string {
  const entries = mounts.map((m, i) => {
    const opts = driver === '9p' ? `trans=virtio,version=9p2000.L${m.readonly ? ',ro' : ''}` : (m.readonly ? 'ro' : 'defaults');
    return `  - [${mountTag(m, i)}, ${JSON.stringify(m.guest)}, ${driver}, "${opts},nofail", "0", "0"]`;
  });
  return `#cloud-config\nmounts:\n${entries.join('\n')}\n`;
}

/**
 * The shares of a VM as QEMU needs them. For virtio-fs, one virtiofsd per share, detached like
 * QEMU; each exits by itself when QEMU closes its socket.
 */
export async function startMounts(spec: VmSpec, driver: '9p' | 'virtiofs'): Promise<{ tag: string; host: string; readonly: boolean; socket?: string }[]> {
  const mounts = spec.mounts.map((m, i) => ({ tag: mountTag(m, i), host: m.host, readonly: !!m.readonly, socket: undefined as string | undefined }));
  if (!mounts.length || driver !== 'virtiofs') return mounts;
  checkDriver('virtiofs');
  for (const [i, m] of mounts.entries()) {
    m.socket = join(spec.dir, `vfs${i}.sock`);
    await unlink(m.socket).catch(() => undefined);
    const logFd = openSync(join(spec.dir, 'virtiofsd.log'), 'a');
    const d = spawn(virtiofsd()!, [`--socket-path=${m.socket}`, '-o', `source=${m.host}`, '-o', 'cache=auto'], { detached: true, stdio: ['ignore', logFd, logFd], env: childEnv() });
    closeSync(logFd);
    d.unref();
    for (let t = 0; t < 100 && !existsSync(m.socket); t++) await new Promise((r) => setTimeout(r, 20));
    if (!existsSync(m.socket)) throw new InternalError(`virtiofsd did not start for ${m.host}: ${tail(join(spec.dir, 'virtiofsd.log'))}`);
  }
  return mounts;
}
