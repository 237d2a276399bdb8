import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { open, readFile, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { InvalidStateError } from '../../../domain/errors.js';
import { writeFileAtomic } from '../../fs-kit/atomic-file.js';
import { backingChain } from '../../images/qcow2-backing.js';
import { rebaseOnto } from './disk-layers.js';

/** The image file a VM's disk stands on, as recorded when a disk was put on it. */
interface Base {
  size: number;
  /** fingerprintOf: what tells this build's file from any other. */
  fingerprint: string;
}

/** A chain link whose backing file is gone: `file` names `base`, which does not exist. */
export interface MissingBase {
  file: string;
  base: string;
}

/** Its file in the data directory. */
export const IMAGE_BASES_FILE = 'image-bases.json';

/** Pieces read to fingerprint a file: a head, a tail and evenly spaced samples between. */
const SAMPLES = 64;
const SAMPLE_BYTES = 64 * 1024;

/**
 * A file's size and the sha256 of 64 pieces of 64 KiB spread over it (4 MiB read, milliseconds):
 * two builds of an image differ in it (a package's bytes move everything after them; a file
 * system's ids and times are near its start), while a copy of the folder, by `mv`, `cp -r` or
 * rsync, keeps it.
 */
export async function fingerprintOf(file: string): Promise<Base> {
  const fh = await open(file, 'r');
  try {
    const { size } = await fh.stat();
    const h = createHash('sha256').update(`${size}\n`);
    const buf = Buffer.alloc(SAMPLE_BYTES);
    const last = Math.max(0, size - SAMPLE_BYTES);
    for (let i = 0; i < SAMPLES; i++) {
      const at = Math.floor((last * i) / (SAMPLES - 1));
      const { bytesRead } = await fh.read(buf, 0, SAMPLE_BYTES, at);
      h.update(buf.subarray(0, bytesRead));
    }
    return { size, fingerprint: h.digest('hex') };
  } finally {
    await fh.close();
  }
}

/** The first link of `disk`'s chain whose backing file does not exist, or undefined when every one does. */
export async function missingBase(disk: string): Promise<MissingBase | undefined> {
  let file = disk;
  for await (const base of backingChain(disk)) {
    if (!existsSync(base)) return { file, base };
    file = base;
  }
  return undefined;
}

/**
 * The image files VMs' disks were put on, by path, with each one's fingerprint: kept in the data
 * directory (`image-bases.json`), so that when the images folder moves (a new `images_dir`, the
 * folder moved with it) a VM whose disk names the old path can be put on the same file at the new
 * one, and only on the same file: a disk stood on another build than its own would read blocks
 * that are not its file system's. A VM made before this was kept is recorded at its next start.
 */
export class ImageBases {
  private known?: Promise<Record<string, Base>>;
  private writes: Promise<void> = Promise.resolve();

  constructor(private readonly file: string) {}

  private all(): Promise<Record<string, Base>> {
    this.known ??= readFile(this.file, 'utf8')
      .then((t) => JSON.parse(t) as Record<string, Base>)
      .catch(() => ({}));
    return this.known;
  }

  /** Records the image file `base` (a disk was put on it), unless it is recorded with its size. */
  async note(base: string): Promise<void> {
    const all = await this.all();
    const size = (await stat(base)).size;
    if (all[base]?.size === size) return;
    all[base] = await fingerprintOf(base);
    const text = JSON.stringify(all);
    this.writes = this.writes.then(() => writeFileAtomic(this.file, text).catch(() => undefined));
    await this.writes;
  }

  /**
   * Puts `disk` (a VM's: the bottom of its chain) back on its image when the image's file moved:
   * `imageDir` is where the VM's image's folder is now. Nothing to do when every file of the chain
   * is there; the file of the same name in `imageDir` when it is the recorded one (returned, for
   * the log); an error that says what is missing and why it is not replaced otherwise.
   */
  async restand(vm: string, disk: string, imageDir: string): Promise<{ from: string; to: string } | undefined> {
    const gone = await missingBase(disk);
    // A layer of its own gone is not a move: QEMU's words say which.
    if (!gone || dirname(gone.base) === dirname(disk)) return undefined;
    const to = join(imageDir, basename(gone.base));
    const refuse = (why: string) =>
      new InvalidStateError(
        `vm ${vm} cannot start: its disk stands on ${gone.base}, which is gone, and ${why}; put the images folder back where it was (or images_dir back to it)`,
      );
    if (basename(dirname(gone.base)) !== basename(imageDir) || !existsSync(to))
      throw refuse(`its image's folder (${imageDir}) has no file of that name`);
    const was = (await this.all())[gone.base];
    if (!was) throw refuse(`no record says which build it was (the VM was last started by an older svc)`);
    const now = await fingerprintOf(to);
    if (now.size !== was.size || now.fingerprint !== was.fingerprint)
      throw refuse(`${to} is another build of the image, not the one it was`);
    await rebaseOnto(gone.file, to);
    await this.note(to);
    return { from: gone.base, to };
  }
}
