import { execFile } from 'node:child_process';
import { lstat, mkdtemp, rm, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from '../../../ports/logger.js';
import { removeOwnDirs } from '../../fs-kit/own-dirs.js';

const run = promisify(execFile);

/**
 * Where RAM images are made before they are copied into a VM's directory: a folder of this
 * daemon's own on a memory filesystem (`qemu.ram_image_staging`, /dev/shm by default). QEMU loads a
 * migration stream into a shared file mapping page by page; on ext4 each page's first write costs a
 * block reservation, and a 512 MB guest's image took 0.5-1.8 s to load there against 0.45 s on
 * tmpfs; the sparse copy onto the VM's disk after takes about 0.25 s (docs/benchmarks.md). The
 * image itself stays on disk, beside the VM: its clones and forks link it and map it, and it
 * outlives a reboot.
 *
 * The root is shared with other users (/dev/shm is world-writable): the folder is made by
 * `mkdtemp` (0700, a name nobody could take first), and when the daemon starts only folders of
 * this data dir's tag that this user owns are swept (what a daemon that crashed mid-make left).
 */
export class RamStaging {
  private dir: Promise<string | undefined> | undefined;
  /** Bytes of the root's room held by images being made. */
  private held = 0;

  /** The sweep of what a crashed daemon left, begun at once: a memory filesystem's files hold memory. */
  private readonly swept: Promise<void>;

  constructor(
    private readonly o: {
      /** The memory filesystem's folder (a path that exists: else nothing is staged). */
      root: string;
      /** Names this data dir's folders (`svc-ram-<tag>-XXXXXX`). */
      tag: string;
      log: Logger;
    },
  ) {
    this.swept = this.sweep().catch((err: Error) =>
      o.log.warn({ root: o.root, err: err.message }, 'cannot sweep the ram image staging folder'),
    );
  }

  private get prefix(): string {
    return `svc-ram-${this.o.tag}-`;
  }

  /**
   * A folder to make an image of at most `bytes` in, that much of the root's room held for it
   * until `release` (images made at once do not count the same free room twice: a shared mapping
   * that outgrows a full tmpfs kills its QEMU): undefined (make it in place) when the root is
   * missing or has less room than that left.
   */
  async dirFor(bytes: number): Promise<{ dir: string; release: () => void } | undefined> {
    const dir = await (this.dir ??= this.open());
    if (!dir) return undefined;
    const fs = await statfs(this.o.root).catch(() => undefined);
    if (!fs || fs.bavail * fs.bsize - this.held < bytes) {
      this.o.log.info(
        { root: this.o.root, need_bytes: bytes, held_bytes: this.held },
        'no room to stage a ram image; making it in place',
      );
      return undefined;
    }
    this.held += bytes;
    let released = false;
    return {
      dir,
      release: () => {
        if (!released) this.held -= bytes;
        released = true;
      },
    };
  }

  /** Removes this daemon's folder and what is in it (the daemon stops). */
  async close(): Promise<void> {
    const dir = await this.dir;
    this.dir = undefined;
    if (dir) await rm(dir, { recursive: true, force: true });
  }

  private async open(): Promise<string | undefined> {
    await this.swept;
    const st = await lstat(this.o.root).catch(() => undefined);
    if (!st?.isDirectory()) return undefined;
    return mkdtemp(join(this.o.root, this.prefix)).catch((err: Error) => {
      this.o.log.warn({ root: this.o.root, err: err.message }, 'cannot stage ram images; making them in place');
      return undefined;
    });
  }

  /** Folders of this tag that this user owns, left by a daemon that stopped without removing its own. */
  private async sweep(): Promise<void> {
    await removeOwnDirs(this.o.root, (n) => n.startsWith(this.prefix));
  }
}

/** Copies a sparse file, keeping its holes holes (coreutils' cp finds them with SEEK_DATA). */
export async function copySparse(from: string, to: string): Promise<void> {
  await run('cp', ['--sparse=always', '--', from, to]);
}
