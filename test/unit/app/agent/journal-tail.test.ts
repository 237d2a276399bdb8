import { expect } from 'chai';
import fc from 'fast-check';
import { unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SegmentReader } from '../../../../src/adapters/agent/journal-reader.js';
import { tailStart } from '../../../../src/app/agent/journal-tail.js';
import type { JournalReader } from '../../../../src/ports/agent/kept-processes.js';
import { tempDir } from '../../../helpers/daemon.js';

/** A journal in memory: `text` cut into segments at `cuts`, each read returning at most its segment's rest. */
function memoryJournal(text: string, cuts: number[]): JournalReader {
  const bytes = Buffer.from(text);
  const bounds = [...new Set([0, ...cuts.filter((c) => c > 0 && c < bytes.length), bytes.length])].sort(
    (a, b) => a - b,
  );
  return {
    async read(from, max) {
      const next = bounds.find((b) => b > from) ?? bytes.length;
      const end = Math.min(next, from + max, bytes.length);
      return { offset: from, data: bytes.subarray(from, Math.max(from, end)) };
    },
    async close() {},
  };
}

/** `tail -n N`'s start, counted another way: the lengths of the lines before the last N. */
function expected(text: string, n: number): number {
  if (n === 0) return Buffer.byteLength(text);
  const lines = text.split('\n');
  if (text.endsWith('\n')) lines.pop();
  if (n >= lines.length) return 0;
  return lines.slice(0, lines.length - n).reduce((sum, l) => sum + Buffer.byteLength(l) + 1, 0);
}

const seg = (dir: string, n: number) => join(dir, `stdout.${String(n).padStart(20, '0')}`);

describe('app/agent/journal-tail: where the last lines of a stream start (tail)', () => {
  const at = (text: string, n: number) =>
    tailStart(memoryJournal(text, []), { first: 0, end: Buffer.byteLength(text) }, n);

  it('counts lines as tail -n does: a last line with or without its newline, 0 for only what comes next', async () => {
    expect(await at('a\nb\nc\n', 1)).to.equal(4);
    expect(await at('a\nb\nc\n', 2)).to.equal(2);
    expect(await at('a\nb\nc\n', 3)).to.equal(0);
    expect(await at('a\nb\nc', 1)).to.equal(4);
    expect(await at('a\nb\nc', 0)).to.equal(5);
    expect(await at('\n\n\n', 2)).to.equal(1);
    expect(await at('no line end at all', 1)).to.equal(0);
    expect(await at('', 3)).to.equal(0);
  });

  it('gives 0 when fewer lines are kept than asked, so the read says what is no longer kept', async () => {
    const dir = tempDir('svc-tail-');
    writeFileSync(seg(dir, 0), 'old 1\nold 2\n');
    writeFileSync(seg(dir, 12), 'new 1\nnew 2\n');
    unlinkSync(seg(dir, 0)); // the stream outgrew its cap
    const reader = new SegmentReader(dir, 'stdout');
    try {
      expect(await tailStart(reader, { first: 12, end: 24 }, 1)).to.equal(18);
      // whether `new 1` is a whole line is not known (segments are cut by size): all that is kept, and the marker
      expect(await tailStart(reader, { first: 12, end: 24 }, 2)).to.equal(0);
      expect(await tailStart(reader, { first: 12, end: 24 }, 3)).to.equal(0);
    } finally {
      await reader.close();
    }
  });

  it('reads back across segments and chunks, and steps over a gap the keeper left (real segments)', async () => {
    const dir = tempDir('svc-tail-');
    const lines = Array.from({ length: 30_000 }, (_, i) => `line ${i + 1}\n`).join('');
    // segments of 100 KB, then a gap of 50 bytes (a write that failed), then two lines
    for (let off = 0; off < lines.length; off += 100_000) writeFileSync(seg(dir, off), lines.slice(off, off + 100_000));
    const after = lines.length + 50;
    writeFileSync(seg(dir, after), 'x\ny\n');
    const reader = new SegmentReader(dir, 'stdout');
    const range = { first: 0, end: after + 4 };
    try {
      expect(await tailStart(reader, range, 1)).to.equal(after + 2);
      // the line `x` ends began in the lost bytes: the read starts there, and says they are lost
      expect(await tailStart(reader, range, 2)).to.equal(lines.length);
      expect(await tailStart(reader, range, 3)).to.equal(lines.lastIndexOf('line 30000\n'));
      expect(await tailStart(reader, range, 12_002)).to.equal(lines.indexOf('line 18001\n'));
      expect(await tailStart(reader, range, 30_002)).to.equal(0);
    } finally {
      await reader.close();
    }
  });

  it('agrees with counting the lines, however the journal is cut and read (property)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.constantFrom('a', 'bc', '\n', 'é'), { maxLength: 60 }).map((p) => p.join('')),
        fc.array(fc.nat(80), { maxLength: 6 }),
        fc.nat(12),
        fc.integer({ min: 1, max: 9 }),
        async (text, cuts, n, chunk) => {
          const end = Buffer.byteLength(text);
          const got = await tailStart(memoryJournal(text, cuts), { first: 0, end }, n, chunk);
          expect(got).to.equal(expected(text, n));
        },
      ),
    );
  });
});
