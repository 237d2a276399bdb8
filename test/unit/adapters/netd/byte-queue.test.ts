import { expect } from 'chai';
import fc from 'fast-check';
import { ByteQueue } from '../../../../src/adapters/netd/byte-queue.js';

describe('ByteQueue: a TCP flow send buffer', () => {
  it('reads any range and drops from the front as one buffer of the bytes pushed would', () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ minLength: 1, maxLength: 40 }), { minLength: 1, maxLength: 12 }),
        fc.array(fc.tuple(fc.nat(), fc.nat(), fc.nat()), { maxLength: 20 }),
        (chunks, steps) => {
          const q = new ByteQueue();
          let whole = Buffer.alloc(0);
          for (const c of chunks) {
            q.push(Buffer.from(c));
            whole = Buffer.concat([whole, Buffer.from(c)]);
          }
          for (const [a, b, d] of steps) {
            expect(q.length).to.equal(whole.length);
            if (whole.length === 0) break;
            const off = a % whole.length;
            const n = 1 + (b % (whole.length - off));
            expect(q.slice(off, n).equals(whole.subarray(off, off + n))).to.equal(true);
            const drop = d % (whole.length + 1);
            q.drop(drop);
            whole = whole.subarray(drop);
          }
        },
      ),
    );
  });

  it('hands out a piece of one pushed buffer without copying it', () => {
    const q = new ByteQueue();
    const first = Buffer.from('abcdef');
    q.push(first);
    q.push(Buffer.from('ghij'));
    const piece = q.slice(1, 3);
    expect(piece.toString()).to.equal('bcd');
    expect(piece.buffer).to.equal(first.buffer);
    expect(q.slice(4, 4).toString()).to.equal('efgh');
  });
});
