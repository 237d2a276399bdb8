import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { chmod, chown, open, rename, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

export interface AtomicWriteOptions {
  /** File mode of the result (default 0600). */
  mode?: number;
  uid?: number;
  gid?: number;
  /** fsync the file and its directory (default true); bulk writers such as tar extraction skip it. */
  durable?: boolean;
}

/**
 * The one way files are replaced, by the daemon, the agent and the CLI: a temp file beside the
 * target, fsync, rename over the target, fsync the directory. A reader sees the old content or
 * the new, never a half-written file; a failure leaves no temp file behind.
 */
export async function writeFileAtomic(
  path: string,
  data: string | Buffer | Readable,
  opts: AtomicWriteOptions | number = {},
): Promise<void> {
  const o = typeof opts === 'number' ? { mode: opts } : opts;
  const mode = o.mode ?? 0o600;
  const dir = dirname(path);
  const tmp = join(dir, `.${basename(path)}.${randomBytes(6).toString('hex')}.tmp`);
  try {
    if (typeof data === 'string' || Buffer.isBuffer(data)) {
      const fh = await open(tmp, 'wx', mode);
      try {
        await fh.writeFile(data);
        if (o.durable !== false) await fh.sync();
      } finally {
        await fh.close();
      }
    } else {
      // Up to 1 MiB queued instead of 16 KiB: the socket keeps flowing while a write is out, and
      // what queued meanwhile goes in one writev (an agent's upload took 2x the CPU without it).
      await pipeline(data, createWriteStream(tmp, { flags: 'wx', mode, highWaterMark: 1 << 20 }));
      if (o.durable !== false) await fsyncFile(tmp);
    }
    await chmod(tmp, mode);
    if (o.uid !== undefined || o.gid !== undefined) await chown(tmp, o.uid ?? -1, o.gid ?? -1);
    await rename(tmp, path);
  } catch (err) {
    await unlink(tmp).catch(() => undefined);
    throw err;
  }
  if (o.durable !== false) await syncDir(dir);
}

async function fsyncFile(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

export async function syncDir(dir: string): Promise<void> {
  const dh = await open(dir, 'r');
  try {
    await dh.sync();
  } catch {
    // some filesystems refuse fsync on directories; the rename is still atomic
  } finally {
    await dh.close();
  }
}
