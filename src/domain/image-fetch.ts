import { InvalidArgumentError } from './errors.js';
import { MOVE_FILE_NAME } from './move.js';

/**
 * An image as one node offers it to another (docs/cluster.md, "Images across nodes"): its files
 * with their sizes and sha256, and its digest (the one moves compare: its disk, kernel and initrd).
 */
export interface ImageBundle {
  id: string;
  digest: string;
  files: { name: string; size: number; sha256: string }[];
}

/** How far a fetch of image `image` from node `from` is: `bytes` of `total` (what it resumed from counts). */
export interface ImageFetchProgress {
  image: string;
  from: string;
  bytes: number;
  total: number;
}

/** The most files an image holds (its manifest, disk, kernel, initrd, and room to spare). */
export const MAX_IMAGE_FILES = 16;
/** The largest file of an image a node fetches (a disk of up to 1 TiB). */
export const MAX_IMAGE_FILE_BYTES = 1024 ** 4;

/** Another node's offer of image `id`, checked to be one before a byte of it is fetched. */
export function checkBundle(raw: unknown, id: string): ImageBundle {
  const b = raw as Partial<ImageBundle> | null;
  const bad = (why: string) => new InvalidArgumentError(`the offer of image ${id} ${why}`);
  if (!b || b.id !== id || typeof b.digest !== 'string' || !/^[a-z0-9]+:[0-9a-z:._-]{1,200}$/.test(b.digest))
    throw bad('does not name it with a digest');
  if (!Array.isArray(b.files) || b.files.length === 0 || b.files.length > MAX_IMAGE_FILES)
    throw bad(`must list 1 to ${MAX_IMAGE_FILES} files`);
  const names = new Set<string>();
  for (const f of b.files as unknown[]) {
    const x = f as Partial<ImageBundle['files'][number]> | null;
    if (!x || typeof x.name !== 'string' || !MOVE_FILE_NAME.test(x.name) || x.name.startsWith('.') || names.has(x.name))
      throw bad(`lists a file that is not one plain name: ${JSON.stringify(x?.name)}`);
    if (!Number.isSafeInteger(x.size) || x.size! < 0 || x.size! > MAX_IMAGE_FILE_BYTES)
      throw bad(`gives ${x.name} a size out of bounds`);
    if (typeof x.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(x.sha256)) throw bad(`gives ${x.name} no sha256`);
    names.add(x.name);
  }
  if (!names.has('manifest.json')) throw bad('has no manifest.json');
  return { id, digest: b.digest, files: b.files.map((f) => ({ name: f.name, size: f.size, sha256: f.sha256 })) };
}
