import { copyFile, readdir, rm, stat, truncate } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * Keeps a log that a child process appends to (opened O_APPEND: QEMU's serial chardev with
 * `append=on`, its stderr) under `maxBytes`: past it, the file is copied to `<path>.1` (replacing
 * the previous one) and truncated in place, so the writer carries on at the new end and readers
 * that follow it see a truncation. A file and its one predecessor: at most about twice the cap.
 */
export async function capLog(path: string, maxBytes: number): Promise<boolean> {
  const size = await stat(path).then(
    (s) => s.size,
    () => 0,
  );
  if (size <= maxBytes) return false;
  await copyFile(path, `${path}.1`);
  await truncate(path, 0);
  return true;
}

/** Removes the oldest files of a folder until what is left fits in `maxBytes`. */
export async function capDir(dir: string, maxBytes: number): Promise<string[]> {
  const files = await Promise.all(
    (await readdir(dir).catch(() => [] as string[])).map(async (name) => {
      const s = await stat(join(dir, name)).catch(() => undefined);
      return s?.isFile() ? { name, size: s.size, mtime: s.mtimeMs } : undefined;
    }),
  );
  const list = files.filter((f) => f !== undefined).sort((a, b) => a.mtime - b.mtime || a.name.localeCompare(b.name));
  let total = list.reduce((n, f) => n + f.size, 0);
  const removed: string[] = [];
  for (const f of list) {
    if (total <= maxBytes) break;
    await rm(join(dir, f.name), { force: true });
    total -= f.size;
    removed.push(f.name);
  }
  return removed;
}
