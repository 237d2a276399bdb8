import { expect } from 'chai';
import { appendFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { segmentsOf, SegmentReader } from '../../../../src/adapters/agent/journal-reader.js';
import { tempDir } from '../../../helpers/daemon.js';

const seg = (dir: string, n: number) => join(dir, `stdout.${String(n).padStart(20, '0')}`);

describe('adapters/agent/journal-reader: a follower reading one stream on', () => {
  let dir: string;
  let reader: SegmentReader;
  beforeEach(() => {
    dir = tempDir('svc-journal-');
    reader = new SegmentReader(dir, 'stdout');
  });
  afterEach(() => reader.close());

  it('reads what is there, then what was appended to the open segment, then the next segment', async () => {
    expect(await reader.read(0, 100)).to.deep.equal({ offset: 0, data: Buffer.alloc(0) });
    writeFileSync(seg(dir, 0), 'hello ');
    expect(await reader.read(0, 3)).to.deep.equal({ offset: 0, data: Buffer.from('hel') });
    expect(await reader.read(3, 100)).to.deep.equal({ offset: 3, data: Buffer.from('lo ') });
    expect(await reader.read(6, 100)).to.deep.equal({ offset: 6, data: Buffer.alloc(0) });
    appendFileSync(seg(dir, 0), 'world');
    expect(await reader.read(6, 100)).to.deep.equal({ offset: 6, data: Buffer.from('world') });
    // the keeper went on in a new segment, after a gap (a write that failed)
    writeFileSync(seg(dir, 20), '!');
    expect(await reader.read(11, 100)).to.deep.equal({ offset: 20, data: Buffer.from('!') });
  });

  it('keeps the segment it reads open: one removed under it is read to its end, then the truncation shows', async () => {
    writeFileSync(seg(dir, 0), '0123456789');
    writeFileSync(seg(dir, 10), 'abcdefghij');
    writeFileSync(seg(dir, 20), 'KLM');
    expect((await reader.read(0, 4)).data.toString()).to.equal('0123');
    // the stream outgrew its cap: the keeper removes the two oldest segments
    unlinkSync(seg(dir, 0));
    unlinkSync(seg(dir, 10));
    expect(await reader.read(4, 100)).to.deep.equal({ offset: 4, data: Buffer.from('456789') });
    expect(await reader.read(10, 100), 'gone before it was opened: said by the offset').to.deep.equal({
      offset: 20,
      data: Buffer.from('KLM'),
    });
  });

  it('reads the rest of a segment the keeper filled up and left between a read that found nothing and the listing', async () => {
    // Segments of 10 bytes: the follower has read all 6 there are, and finds nothing at 6.
    writeFileSync(seg(dir, 0), 'abcdef');
    let keeperWrites = () => {};
    const racing = new SegmentReader(dir, 'stdout', async (d, s) => {
      keeperWrites();
      return segmentsOf(d, s);
    });
    try {
      expect((await racing.read(0, 100)).data.toString()).to.equal('abcdef');
      // Right after that read finds nothing, the keeper writes 8 bytes: 4 fill the segment, 4 begin the next.
      keeperWrites = () => {
        keeperWrites = () => {};
        appendFileSync(seg(dir, 0), 'ghij');
        writeFileSync(seg(dir, 10), 'klmn');
      };
      expect(await racing.read(6, 100), 'the rest of the whole segment, no gap').to.deep.equal({
        offset: 6,
        data: Buffer.from('ghij'),
      });
      expect(await racing.read(10, 100)).to.deep.equal({ offset: 10, data: Buffer.from('klmn') });
    } finally {
      await racing.close();
    }
  });

  it('says a gap before the first kept segment when that segment is still empty (bytes lost on a full disk)', async () => {
    writeFileSync(seg(dir, 0), 'abc');
    expect((await reader.read(0, 100)).data.toString()).to.equal('abc');
    // The keeper lost 7 bytes: it made room with its oldest segment, and an empty one says where the stream is.
    unlinkSync(seg(dir, 0));
    writeFileSync(seg(dir, 10), '');
    expect(await reader.read(3, 100), 'the gap, with nothing after it yet').to.deep.equal({
      offset: 10,
      data: Buffer.alloc(0),
    });
    appendFileSync(seg(dir, 10), 'xyz');
    expect(await reader.read(10, 100)).to.deep.equal({ offset: 10, data: Buffer.from('xyz') });
  });

  it('reads from before the open segment again by listing (a reader moved back)', async () => {
    writeFileSync(seg(dir, 0), 'abc');
    writeFileSync(seg(dir, 3), 'def');
    expect((await reader.read(3, 100)).data.toString()).to.equal('def');
    expect(await reader.read(1, 100)).to.deep.equal({ offset: 1, data: Buffer.from('bc') });
  });
});
