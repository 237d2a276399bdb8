import { expect } from 'chai';
import fc from 'fast-check';
import {
  BadPieces,
  encodeFrames,
  FRAME_BYTES,
  pieceChunks,
  readPieces,
} from '../../../../src/adapters/http-kit/output-pieces.js';
import type { OutputPiece } from '../../../../src/domain/processes.js';

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

async function* from<T>(xs: T[]): AsyncIterable<T> {
  for (const x of xs) yield x;
}

/** A body cut into chunks at the given sizes (cycled). */
function cut(body: Buffer, sizes: number[]): Buffer[] {
  const out: Buffer[] = [];
  for (let pos = 0, i = 0; pos < body.length; i++) {
    const n = 1 + (sizes[i % Math.max(1, sizes.length)] ?? body.length);
    out.push(body.subarray(pos, pos + n));
    pos += n;
  }
  return out;
}

describe('adapters/http-kit output pieces (agent to daemon, unencoded)', () => {
  it('reads back every piece and frame as written, however the body is cut (property)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.oneof(fc.uint8Array({ minLength: 1, maxLength: 300 }), fc.nat(1000)), { maxLength: 12 }),
        fc.array(fc.nat(400)),
        async (items, sizes) => {
          const pieces: OutputPiece[] = items.map((x, i) =>
            typeof x === 'number'
              ? { truncated: { stream: 'stdout', before: x } }
              : { stream: i % 2 ? 'stderr' : 'stdout', offset: i * 1000, bytes: x },
          );
          const body = Buffer.concat(
            (await collect(pieceChunks(from(pieces)))).map((c) => (typeof c === 'string' ? Buffer.from(c) : c)),
          );
          const back = await collect(readPieces(from(cut(body, sizes)), 4096, 1024));
          expect(back).to.have.length(pieces.length);
          back.forEach((b, i) => {
            const p = pieces[i];
            if ('bytes' in p) {
              expect(b.head).to.deep.equal({ stream: p.stream, offset: p.offset, n: p.bytes.length });
              expect(Buffer.from(p.bytes).equals(b.bytes!)).to.equal(true);
            } else expect(b).to.deep.equal({ head: p });
          });
        },
      ),
    );
  });

  it('refuses what a guest could use to make the daemon buffer without end, or garbage', async () => {
    const read = (body: string | Buffer) => collect(readPieces(from([Buffer.from(body)]), 64, 1024));
    const fails = async (body: string | Buffer, why: RegExp) => {
      const err = await read(body).then(
        () => undefined,
        (e: Error) => e,
      );
      expect(err).to.be.instanceOf(BadPieces);
      expect(err!.message).to.match(why);
    };
    await fails('x'.repeat(100), /head longer than 64/);
    await fails(`${'x'.repeat(100)}\n`, /head longer than 64/);
    await fails('not json\n', /not JSON/);
    await fails('{"stream":"stdout","offset":0,"n":2000}\n', /piece of 2000 bytes/);
    await fails('{"stream":"stdout","offset":0,"n":-1}\n', /piece of -1 bytes/);
    await fails('{"stream":"stdout","offset":0,"n":"3"}\n', /piece of "3" bytes/);
    await fails('{"stream":"stdout","offset":0,"n":5}\nabc', /ended inside a piece/);
    expect(await read('{"stream":"stdout","offset":0,"n":3}\nabc')).to.deep.equal([
      { head: { stream: 'stdout', offset: 0, n: 3 }, bytes: Buffer.from('abc') },
    ]);
  });

  it('cuts a large piece into frames of at most 64 KiB, text only between characters, offsets running on', () => {
    const text = Buffer.from('a€😀'.repeat(30_000)); // 1, 3 and 4 byte characters
    const bin = Buffer.concat([Buffer.from([0xff]), text]);
    for (const [bytes, encoding] of [
      [text, undefined],
      [bin, 'base64'],
    ] as const) {
      const frames = [...encodeFrames('stdout', 1000, bytes)] as { offset: number; data: string; encoding?: string }[];
      expect(frames.length).to.be.greaterThan(3);
      let at = 1000;
      const parts = frames.map((f) => {
        expect(f.offset).to.equal(at);
        expect(f.encoding).to.equal(encoding);
        const b = f.encoding ? Buffer.from(f.data, 'base64') : Buffer.from(f.data);
        expect(b.length).to.be.at.most(FRAME_BYTES);
        at += b.length;
        return b;
      });
      expect(Buffer.concat(parts).equals(bytes)).to.equal(true);
    }
  });
});
