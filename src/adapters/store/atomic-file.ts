import { randomBytes } from 'node:crypto';
import { open, rename, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/**
 * The one place state is written: a temp file beside the target, fsync, rename over the target,
 * fsync the directory. A reader sees the old content or the new, never a half-written file.
 */
export async function writeFileAtomic(path: string, data: string | Buffer, mode = 0o600): Promise<void> {
  const dir = dirname(path);
  const tmp = join(dir, `.${basename(path)}.${randomBytes(6).toString('hex')}.tmp`);
  const fh = await open(tmp, 'wx', mode);
  try {
    await fh.writeFile(data);
    await fh.sync();
  } catch (err) {
    await fh.close();
    await unlink(tmp).catch(() => undefined);
    throw err;
  }
  await fh.close();
  try {
    await rename(tmp, path);
  } catch (err) {
    await unlink(tmp).catch(() => undefined);
    throw err;
  }
  await syncDir(dir);
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
