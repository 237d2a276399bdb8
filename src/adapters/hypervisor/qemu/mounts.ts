import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync } from 'node:fs';
import { unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { InternalError, NotSupportedError } from '../../../domain/errors.js';
import { mountTag } from '../../../domain/vm.js';
import type { VmSpec } from '../../../ports/hypervisor.js';
import { tail } from './qemu-files.js';
import { childEnv } from '../../process-kit/child-env.js';

export const VIRTIOFSD_PATHS = ['/usr/lib/qemu/virtiofsd', '/usr/libexec/virtiofsd', '/usr/bin/virtiofsd'];

export function virtiofsd(): string | undefined {
  return VIRTIOFSD_PATHS.find((p) => existsSync(p));
}

/** Host side of mount validation: every host path must be an existing directory. */
export function checkDriver(driver: '9p' | 'virtiofs'): void {
  if (driver === 'virtiofs' && !virtiofsd()) {
    throw new NotSupportedError(
      `mount_driver virtiofs: virtiofsd is not installed (looked in ${VIRTIOFSD_PATHS.join(', ')}); install qemu-system-common or use mount_driver: 9p`,
    );
  }
}

/**
 * The shares of a VM as QEMU needs them. For virtio-fs, one virtiofsd per share, detached like
 * QEMU; each exits by itself when QEMU closes its socket.
 */
export async function startMounts(
  spec: VmSpec,
  driver: '9p' | 'virtiofs',
): Promise<{ tag: string; host: string; readonly: boolean; socket?: string }[]> {
  const mounts = spec.mounts.map((m, i) => ({
    tag: mountTag(m, i),
    host: m.host,
    readonly: !!m.readonly,
    socket: undefined as string | undefined,
  }));
  if (!mounts.length || driver !== 'virtiofs') return mounts;
  checkDriver('virtiofs');
  for (const [i, m] of mounts.entries()) {
    m.socket = join(spec.dir, `vfs${i}.sock`);
    await unlink(m.socket).catch(() => undefined);
    const logFd = openSync(join(spec.dir, 'virtiofsd.log'), 'a');
    const d = spawn(virtiofsd()!, [`--socket-path=${m.socket}`, '-o', `source=${m.host}`, '-o', 'cache=auto'], {
      detached: true,
      stdio: ['ignore', logFd, logFd],
      env: childEnv(),
    });
    closeSync(logFd);
    d.unref();
    // one that cannot be run at all is an `error` event (unheard, it would stop the daemon)
    let failed: Error | undefined;
    d.on('error', (err) => (failed ??= err));
    for (let t = 0; t < 100 && !failed && !existsSync(m.socket); t++) await new Promise((r) => setTimeout(r, 20));
    if (failed || !existsSync(m.socket))
      throw new InternalError(
        `virtiofsd did not start for ${m.host}: ${failed?.message ?? tail(join(spec.dir, 'virtiofsd.log'))}`,
      );
  }
  return mounts;
}
