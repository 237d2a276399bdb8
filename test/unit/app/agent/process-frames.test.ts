import { expect } from 'chai';
import fc from 'fast-check';
import { wholeCharacters } from '../../../../src/app/agent/process-service.js';
import { encodeFrames } from '../../../../src/adapters/http-kit/output-pieces.js';
import type { OutputFrame, ProcessStream } from '../../../../src/domain/processes.js';

/** What the agent sends of `data` read at `offset`, as the daemon frames it: null when it waits. */
function toFrame(stream: ProcessStream, offset: number, data: Buffer, ended: boolean) {
  const used = wholeCharacters(data, ended);
  if (!used) return null;
  const frames = [...encodeFrames(stream, offset, data.subarray(0, used))];
  expect(frames).to.have.length(1); // these are all under a frame's size
  return { frame: frames[0] as OutputFrame, used };
}

describe('app/agent/process-service pieces, as frames', () => {
  it('sends UTF-8 as text, whole characters only: a cut character waits for its rest', () => {
    const euro = Buffer.from('ab€'); // € is 3 bytes
    expect(toFrame('stdout', 10, euro, false)).to.deep.equal({
      frame: { stream: 'stdout', offset: 10, data: 'ab€' },
      used: 5,
    });
    const cut = euro.subarray(0, 4);
    expect(toFrame('stdout', 10, cut, false)).to.deep.equal({
      frame: { stream: 'stdout', offset: 10, data: 'ab' },
      used: 2,
    });
    expect(toFrame('stdout', 12, cut.subarray(2), false)).to.equal(null);
    // once the process ended, the rest goes as it is
    expect(toFrame('stdout', 12, cut.subarray(2), true)).to.deep.include({ used: 2 });
  });

  it('sends what is not UTF-8 as base64', () => {
    const bin = Buffer.from([0xff, 0xfe, 0x00, 0x41]);
    expect(toFrame('stderr', 0, bin, false)).to.deep.equal({
      frame: { stream: 'stderr', offset: 0, data: bin.toString('base64'), encoding: 'base64' },
      used: 4,
    });
  });

  it('loses no byte and repeats none, however the bytes are cut (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.string(), fc.uint8Array({ maxLength: 8 })), { maxLength: 20 }),
        fc.array(fc.nat(30)),
        (parts, cuts) => {
          const all = Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : Buffer.from(p))));
          let pos = 0;
          const out: Buffer[] = [];
          let i = 0;
          while (pos < all.length) {
            const end = Math.min(all.length, pos + 1 + (cuts[i++ % Math.max(1, cuts.length)] ?? 4));
            const last = end === all.length;
            const f = toFrame('stdout', pos, all.subarray(pos, end), last);
            if (!f) {
              // nothing whole yet: the reader waits for more bytes; here, the next read is longer
              const g = toFrame(
                'stdout',
                pos,
                all.subarray(pos, Math.min(all.length, pos + 8)),
                pos + 8 >= all.length,
              )!;
              expect(g.frame).to.have.property('offset', pos);
              out.push(bytesOf(g.frame as { data: string; encoding?: string }));
              pos += g.used;
              continue;
            }
            expect(f.frame).to.have.property('offset', pos);
            out.push(bytesOf(f.frame as { data: string; encoding?: string }));
            pos += f.used;
          }
          expect(Buffer.concat(out).equals(all)).to.equal(true);
        },
      ),
    );
  });
});

function bytesOf(f: { data: string; encoding?: string }): Buffer {
  return f.encoding === 'base64' ? Buffer.from(f.data, 'base64') : Buffer.from(f.data);
}
