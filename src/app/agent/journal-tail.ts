import type { JournalReader, StreamRange } from '../../ports/agent/kept-processes.js';

/** Bytes read at once while a tail looks back for line ends. */
const TAIL_CHUNK = 64 * 1024;

/**
 * Where the last `lines` lines of a stream's kept bytes start, as `tail -n` counts them: a last
 * line without its newline is a line, the newline that ends the bytes does not begin one. 0 is
 * "only what comes next" (the end). When fewer lines are kept than asked, 0: the read then starts
 * at the first kept byte, and says what is no longer kept as any read from 0 does.
 *
 * Reads back from the end in chunks, so a tail of a few lines reads a chunk or two whatever the
 * journal holds; at most it reads the kept bytes once (output with no line ends). Bytes lost
 * inside the journal (a gap) are stepped over. `chunk`: the bytes read at once (tests make it small).
 */
export async function tailStart(
  reader: JournalReader,
  range: StreamRange,
  lines: number,
  chunk = TAIL_CHUNK,
): Promise<number> {
  if (lines === 0) return range.end;
  let found = 0;
  for (let hi = range.end; hi > range.first;) {
    const lo = Math.max(range.first, hi - chunk);
    const parts = await readSpan(reader, lo, hi);
    for (let i = parts.length - 1; i >= 0; i--) {
      const { offset, data } = parts[i];
      for (let p = data.length; p > 0;) {
        const nl = data.lastIndexOf(10, p - 1);
        if (nl < 0) break;
        p = nl;
        if (offset + nl === range.end - 1) continue; // ends the last line
        if (++found === lines) return offset + nl + 1;
      }
    }
    hi = lo;
  }
  return 0;
}

/** The kept bytes of [lo, hi), in order, as the reader has them (one piece per segment). */
async function readSpan(reader: JournalReader, lo: number, hi: number): Promise<{ offset: number; data: Buffer }[]> {
  const parts: { offset: number; data: Buffer }[] = [];
  for (let at = lo; at < hi;) {
    const r = await reader.read(at, hi - at);
    if (!r.data.length || r.offset >= hi) break;
    const data = r.data.subarray(0, hi - r.offset);
    parts.push({ offset: r.offset, data });
    at = r.offset + data.length;
  }
  return parts;
}
