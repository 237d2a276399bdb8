import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';

/** Where an image's digest is kept, with the sizes and times of the files it was computed from. */
const CACHE = '.digest';

interface Cached {
  digest: string;
  files: { name: string; size: number; mtimeMs: number }[];
}

/**
 * The content digest of an image's files (`sha256:` over each file's name and bytes, in the order
 * given): what two nodes compare to know a disk made on one stands on the other's image. Computed
 * once per build (a few seconds for a GiB) and kept beside the files while they are unchanged.
 */
export async function imageDigest(dir: string, files: string[]): Promise<string> {
  const now = await Promise.all(
    files.map(async (name) => {
      const st = await stat(join(dir, name));
      return { name, size: st.size, mtimeMs: st.mtimeMs };
    }),
  );
  const cached = await readFile(join(dir, CACHE), 'utf8')
    .then((t) => JSON.parse(t) as Cached)
    .catch(() => undefined);
  if (cached && JSON.stringify(cached.files) === JSON.stringify(now)) return cached.digest;
  const hash = createHash('sha256');
  for (const { name } of now) {
    hash.update(`${name}\0`);
    for await (const chunk of createReadStream(join(dir, name))) hash.update(chunk as Buffer);
    hash.update('\0');
  }
  const digest = `sha256:${hash.digest('hex')}`;
  await writeFileAtomic(join(dir, CACHE), JSON.stringify({ digest, files: now } satisfies Cached)).catch(
    () => undefined,
  );
  return digest;
}
