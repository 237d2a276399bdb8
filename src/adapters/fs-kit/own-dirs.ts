import { lstat, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * Removes the folders directly in `root` whose name `pick` takes and that this user owns (a
 * shared root such as /tmp or /dev/shm holds other users' too; a link is never followed).
 * Answers how many went; a root that is not there has none.
 */
export async function removeOwnDirs(root: string, pick: (name: string) => boolean): Promise<number> {
  const uid = process.getuid?.();
  let removed = 0;
  for (const n of await readdir(root).catch(() => [] as string[])) {
    if (!pick(n)) continue;
    const p = join(root, n);
    const st = await lstat(p).catch(() => undefined);
    if (!st?.isDirectory() || st.uid !== uid) continue;
    await rm(p, { recursive: true, force: true });
    removed++;
  }
  return removed;
}
