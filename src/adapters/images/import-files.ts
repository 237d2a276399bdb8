import { realpath, stat } from 'node:fs/promises';
import { LIMITS } from '../../domain/create-request.js';
import { InvalidArgumentError } from '../../domain/errors.js';
import type { ImageSource } from '../../domain/image-request.js';
import { fileHead } from '../fs-kit/file-head.js';
import type { Room } from '../fs-kit/free-room.js';
import { allowedDirs, within, writtenWithin } from '../fs-kit/paths.js';

/** The largest disk a VM may have, and a GiB of a qcow2's tables over it: a disk's file is never more. */
export const DISK_FILE_CAP: Room = {
  bytes: (LIMITS.disk_gb[1] + 1) * 2 ** 30,
  why: `the largest disk a VM may have is ${LIMITS.disk_gb[1]} GB`,
};

/**
 * A host file an image is imported from: it must exist, be a regular file, and with its links
 * resolved lie inside one of `allowed` (import_dirs; none configured means nothing is imported).
 * Returns its real path, which is what gets read, so a link swapped later cannot redirect it.
 */
export async function checkImportFile(path: string, allowed: readonly string[], what = 'from'): Promise<string> {
  if (!allowed.length) {
    throw new InvalidArgumentError(
      `${what}: this daemon imports no host files (import_dirs is empty); add the folder holding ${path} to import_dirs in the daemon's config`,
    );
  }
  if (!path.startsWith('/'))
    throw new InvalidArgumentError(`${what}: ${JSON.stringify(path)} must be an absolute host path`);
  const dirs = await allowedDirs(allowed);
  const outside = (how: string) =>
    new InvalidArgumentError(
      `${what}: ${path} ${how} outside the folders images may be imported from (import_dirs: ${allowed.join(', ')})`,
    );
  // The path as written first: whether a file outside exists, and where a link leads, stays unsaid.
  if (!writtenWithin(path, dirs)) throw outside('is');
  const st = await stat(path).catch(() => undefined);
  if (!st) throw new InvalidArgumentError(`${what}: ${path} does not exist`);
  if (!st.isFile()) throw new InvalidArgumentError(`${what}: ${path} is not a regular file`);
  const file = await realpath(path);
  if (!dirs.some((d) => within(file, d.real))) throw outside('is a link that leads');
  return file;
}

/**
 * The first check of an import, the same on every adapter: a container archive is a tar (ustar
 * magic), a disk is a qcow2 or a raw disk with a partition table. InvalidArgumentError otherwise.
 */
export async function sniffImportFile(
  file: string,
  type: Exclude<ImageSource['type'], 'docker' | 'url'>,
  label = file,
): Promise<void> {
  const buf = await fileHead(file, 1024);
  const n = buf.length;
  if (type !== 'disk') {
    if (n < 512 || buf.subarray(257, 262).toString('latin1') !== 'ustar') {
      throw new InvalidArgumentError(
        `from: ${label} is not a tar archive (an ${type} is what podman save, docker save or skopeo copy write)`,
      );
    }
    return;
  }
  const packed = COMPRESSED.find((c) => buf.subarray(0, c.magic.length).equals(c.magic));
  if (packed)
    throw new InvalidArgumentError(
      `from: ${label} is still ${packed.name}-compressed once unpacked; import the disk (a .qcow2, .img or .raw), compressed once at most`,
    );
  const qcow2 = buf.subarray(0, 4).equals(Buffer.from([0x51, 0x46, 0x49, 0xfb]));
  const mbr = n >= 512 && buf[510] === 0x55 && buf[511] === 0xaa;
  const gpt = buf.subarray(512, 520).toString('latin1') === 'EFI PART';
  if (!qcow2 && !mbr && !gpt)
    throw new InvalidArgumentError(`from: ${label} is neither a qcow2 nor a raw disk with a partition table`);
}

/** What a disk shipped compressed starts with (a distribution's `.raw.xz`, `.img.gz`); each is unpacked once (disk-unpack.ts). */
export const COMPRESSED = [
  { name: 'xz', magic: Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]) },
  { name: 'gzip', magic: Buffer.from([0x1f, 0x8b]) },
  { name: 'zstd', magic: Buffer.from([0x28, 0xb5, 0x2f, 0xfd]) },
  { name: 'bzip2', magic: Buffer.from('BZh') },
];
