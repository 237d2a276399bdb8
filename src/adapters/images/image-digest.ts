import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';

/** Where an image's file hashes are kept, with the size and time of each file they were taken of. */
const CACHE = '.digest';

/** One file of an image with its sha256 (what a node fetching the image checks, file by file). */
export interface HashedFile {
  name: string;
  size: number;
  sha256: string;
}

type Cache = Record<string, { size: number; mtimeMs: number; sha256: string }>;

/**
 * The files' hashes and their digest (`sha256:` over each file's name and hash, in the order
 * given): what two nodes compare to know that a disk made on one stands on the other's image, and
 * what a node fetching an image checks. A file is read once per build (seconds for a GiB); its
 * hash is kept beside it while its size and time are unchanged.
 */
export async function hashImage(dir: string, names: string[]): Promise<{ digest: string; files: HashedFile[] }> {
  const cache = await readFile(join(dir, CACHE), 'utf8')
    .then((t) => JSON.parse(t) as Cache)
    .catch((): Cache => ({}));
  let changed = false;
  const files: HashedFile[] = [];
  for (const name of names) {
    const st = await stat(join(dir, name));
    let c = cache[name];
    if (!c || c.size !== st.size || c.mtimeMs !== st.mtimeMs || typeof c.sha256 !== 'string') {
      const h = createHash('sha256');
      for await (const chunk of createReadStream(join(dir, name))) h.update(chunk as Buffer);
      c = cache[name] = { size: st.size, mtimeMs: st.mtimeMs, sha256: h.digest('hex') };
      changed = true;
    }
    files.push({ name, size: c.size, sha256: c.sha256 });
  }
  if (changed) await writeFileAtomic(join(dir, CACHE), JSON.stringify(cache)).catch(() => undefined);
  return { digest: digestOf(files), files };
}

/** The digest of files by their hashes. */
export function digestOf(files: readonly Pick<HashedFile, 'name' | 'sha256'>[]): string {
  const h = createHash('sha256');
  for (const f of files) h.update(`${f.name}\0${f.sha256}\n`);
  return `sha256:${h.digest('hex')}`;
}
