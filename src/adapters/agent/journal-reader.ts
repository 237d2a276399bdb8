import { open, readdir, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { ProcessStream } from '../../domain/processes.js';
import type { JournalRead, JournalReader } from '../../ports/agent/kept-processes.js';

const EMPTY = Buffer.alloc(0);

/** One segment of a stream's journal: svc-keep's `<stream>.<20-digit start offset>`. */
export interface Segment {
  start: number;
  path: string;
}

/** A stream's segments in a kept process's directory, oldest first. */
export async function segmentsOf(dir: string, stream: ProcessStream): Promise<Segment[]> {
  const names = await readdir(dir).catch(() => [] as string[]);
  return names
    .filter((n) => n.startsWith(`${stream}.`) && /^\d{20}$/.test(n.slice(stream.length + 1)))
    .map((n) => ({ start: Number(n.slice(stream.length + 1)), path: join(dir, n) }))
    .sort((a, b) => a.start - b.start);
}

/**
 * Reads one stream's journal on and on, the way a follower does: the segment being read stays
 * open, so a read that finds bytes costs one pread; the directory is listed again only when the
 * open segment has nothing at the offset asked (it may be whole, the next one begun; or the
 * offset is before it). Under TCG every file operation of the agent's costs the guest's one
 * vCPU a visible slice; a listing, an open, a stat and a close per piece were most of a
 * follower's cost (docs/benchmarks.md, durable processes).
 *
 * A segment svc-keep removes (the stream outgrew its cap) while it is open here is still read to
 * its end: those bytes are right where they were; the truncation is said at the next listing.
 */
export class SegmentReader implements JournalReader {
  private current: { start: number; fh: FileHandle } | undefined;

  /** `list`: the stream's segments now (a test puts the keeper's writes in front of it). */
  constructor(
    private readonly dir: string,
    private readonly stream: ProcessStream,
    private readonly list: (dir: string, stream: ProcessStream) => Promise<Segment[]> = segmentsOf,
  ) {}

  async read(from: number, max: number): Promise<JournalRead> {
    // The open segment's start when it had nothing at `from` just now: not read again below when
    // the listing leads back to it (a caught-up follower; its wait looks again once it is set up).
    let emptyAt: number | undefined;
    if (this.current && from >= this.current.start) {
      const data = await this.pread(this.current.fh, from - this.current.start, max);
      if (data.length) return { offset: from, data };
      emptyAt = this.current.start;
    }
    for (let attempt = 0; ; attempt++) {
      const segs = await this.list(this.dir, this.stream);
      if (!segs.length) return { offset: from, data: EMPTY };
      let i = segs.findLastIndex((s) => s.start <= from);
      if (i < 0) i = 0; // before the first kept byte: read from it
      const seg = segs[i];
      let fh: FileHandle;
      try {
        fh = await this.openSegment(seg);
      } catch (err) {
        // the keeper removed it (the stream outgrew its cap) between the listing and the open
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || attempt > 3) throw err;
        continue;
      }
      const offset = Math.max(from, seg.start);
      const next = segs[i + 1];
      // The open segment had nothing at `from` before this listing. With no segment after it,
      // nothing more is there to find. With one, the keeper may have filled it up (and then begun
      // the next) between that read and the listing: it is read again, or those bytes would be
      // taken for a gap and skipped (a follower lost 16 KiB so, 2026-11-29). A segment that has a
      // next one is whole, so this read sees all it will ever hold.
      const data =
        emptyAt === seg.start && attempt === 0 && !next ? EMPTY : await this.pread(fh, offset - seg.start, max);
      if (data.length) return { offset, data };
      // At or past this segment's end: the next one's start, after a gap, or nothing yet. From
      // before the first kept byte, the gap is said even when nothing follows it yet: the keeper
      // makes an empty segment where bytes it lost end (a full disk), and may write no more.
      if (!next) return { offset, data: EMPTY };
      if (attempt > 3) return { offset: next.start, data: EMPTY };
      from = next.start;
    }
  }

  async close(): Promise<void> {
    const c = this.current;
    this.current = undefined;
    await c?.fh.close().catch(() => undefined);
  }

  private async openSegment(seg: Segment): Promise<FileHandle> {
    if (this.current?.start === seg.start) return this.current.fh;
    const fh = await open(seg.path, 'r');
    await this.close();
    this.current = { start: seg.start, fh };
    return fh;
  }

  private async pread(fh: FileHandle, position: number, max: number): Promise<Buffer> {
    const buf = Buffer.allocUnsafe(max);
    const { bytesRead } = await fh.read(buf, 0, max, position);
    return bytesRead === max ? buf : buf.subarray(0, bytesRead);
  }
}
