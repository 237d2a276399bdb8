import { open, unlink } from 'node:fs/promises';
import { isNoSpace } from '../../domain/errors.js';
import type { Logger } from '../../ports/logger.js';

/** How long after giving the room up it is asked for again, at the next write that needs it. */
const RETAKE_MS = 10_000;

/**
 * Room held on the data dir's disk (a file of real blocks), given up when a write that must not
 * fail meets a full disk: the record of a VM that exists, after the hypervisor acted on it, or the
 * intent of a delete. Without it, a shutdown on a full disk stopped the VM and then could not say
 * so (507, the record on disk still `running`). A create does not use it: it is refused with 507
 * and leaves nothing, as before. The room is taken again at a later write once the disk has it.
 */
export class DiskReserve {
  private held = false;
  private releasedAt = 0;

  constructor(
    private readonly path: string,
    private readonly bytes: number,
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  /** Takes the room when it is not held and the disk has it; a full disk leaves it for later. */
  async take(): Promise<void> {
    if (this.held || this.bytes <= 0) return;
    const fh = await open(this.path, 'w', 0o600).catch(() => undefined);
    if (!fh) return;
    try {
      // Zeros written, not a hole: the blocks must be the file's.
      const chunk = Buffer.alloc(Math.min(this.bytes, 1 << 20));
      for (let at = 0; at < this.bytes; at += chunk.length)
        await fh.write(chunk, 0, Math.min(chunk.length, this.bytes - at), at);
      await fh.sync();
      this.held = true;
    } catch (err) {
      if (!isNoSpace(err))
        this.log.warn({ err: (err as Error).message, path: this.path }, 'cannot keep a disk reserve');
    } finally {
      await fh.close();
    }
    if (!this.held) await unlink(this.path).catch(() => undefined);
  }

  /**
   * Runs `write`; when it meets a full disk and the room is held, gives the room up and runs it
   * again. Other failures, and a full disk with no room held, are thrown.
   */
  async write<T>(what: string, write: () => Promise<T>): Promise<T> {
    if (!this.held && this.bytes > 0 && this.now() - this.releasedAt >= RETAKE_MS) {
      this.releasedAt = this.now(); // one try per RETAKE_MS, taken or not
      await this.take();
    }
    try {
      return await write();
    } catch (err) {
      if (!isNoSpace(err) || !this.held) throw err;
      await unlink(this.path).catch(() => undefined);
      this.held = false;
      this.releasedAt = this.now();
      this.log.warn(
        { path: this.path, mb: this.bytes / (1 << 20), what },
        'the disk under the data dir is full: its reserve was given up so that this could be recorded; make room',
      );
      return write();
    }
  }

  get holding(): boolean {
    return this.held;
  }
}
