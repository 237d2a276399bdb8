import type { ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InternalError } from '../../../domain/errors.js';
import { alive } from '../../process-kit/pid-alive.js';
import type { QemuLayout } from './qemu-args.js';
import { QmpClient } from './qmp-client.js';

export { alive };

/**
 * Is `pid` a QEMU this adapter started for the VM? Its command line must hold every mark (the
 * disk path, the process tag), so a recycled pid is never taken for it.
 */
export function isQemuOf(pid: number, ...marks: string[]): boolean {
  let cmdline: string;
  try {
    cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return false;
  }
  return marks.every((m) => cmdline.includes(m));
}

/** A socket path in `dir` (QMP, the NIC's); Unix socket paths are limited to ~108 bytes, long ones move to tmp. */
export function qmpPath(dir: string, name = 'qmp.sock'): string {
  const p = join(dir, name);
  return p.length < 100
    ? p
    : join(
        tmpdir(),
        `svc-${name === 'qmp.sock' ? 'qmp' : name.replace(/\.sock$/, '')}-${createHash('sha1').update(p).digest('hex').slice(0, 16)}.sock`,
      );
}

export function layout(dir: string): QemuLayout {
  return {
    dir,
    disk: join(dir, 'disk.qcow2'),
    seed: join(dir, 'seed.iso'),
    qmp: qmpPath(dir),
    net: qmpPath(dir, 'net.sock'),
    serial: join(dir, 'serial.log'),
    pidfile: join(dir, 'qemu.pid'),
  };
}

export function tail(path: string, lines = 5): string {
  try {
    return readFileSync(path, 'utf8').trim().split('\n').slice(-lines).join(' | ');
  } catch {
    return '';
  }
}

/**
 * Resolves with a connected QMP client, or an Error when QEMU exits, cannot be run at all (its
 * binary gone or not executable, no descriptors or processes left: an `error` event, which
 * unheard would stop the daemon), or never opens its socket.
 */
export async function waitForQmp(child: ChildProcess, path: string): Promise<QmpClient | Error> {
  let exited = false;
  let failed: Error | undefined;
  child.once('exit', () => {
    exited = true;
  });
  child.on('error', (err) => (failed ??= err));
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    if (failed) return new Error(`qemu could not be started: ${failed.message}`);
    if (exited) return new Error('qemu exited during start');
    if (existsSync(path)) {
      try {
        return await QmpClient.connect(path, 3000);
      } catch {
        // not accepting yet
      }
    }
    // The socket appears early in QEMU's start (connecting then waits for its greeting): look often.
    await new Promise((r) => setTimeout(r, 5));
  }
  child.kill('SIGKILL');
  return new Error('qemu did not open its monitor within 15 s');
}

/**
 * Kills a QEMU of the VM in `dir` that no adapter tracks (a crash between spawn and record, a
 * monitor that no longer answers): found by the pidfile QEMU writes at start (`pidfile`, a name in
 * `dir`: the VM's own QEMU's by default) and checked by its command line (this VM's disk, or one
 * of `disks`: a QEMU started as a spare names the disk where it was started), so a recycled pid is
 * never killed. `found` hears of it first.
 */
export async function killStray(
  dir: string,
  found: (pid: number) => void,
  pidfile?: string,
  disks = [layout(dir).disk],
): Promise<void> {
  const pid = Number(await readFile(pidfile ? join(dir, pidfile) : layout(dir).pidfile, 'utf8').catch(() => ''));
  if (!Number.isInteger(pid) || pid <= 1 || !alive(pid)) return;
  if (!disks.some((d) => isQemuOf(pid, d))) return;
  found(pid);
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    return;
  }
  for (let i = 0; i < 200 && alive(pid); i++) await new Promise((r) => setTimeout(r, 50));
  if (alive(pid)) throw new InternalError(`qemu pid ${pid} in ${dir} did not die`);
}
