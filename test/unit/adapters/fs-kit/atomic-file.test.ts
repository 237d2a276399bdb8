import { expect } from 'chai';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Readable, Writable } from 'node:stream';
import { copyInto, writeFileAtomic } from '../../../../src/adapters/fs-kit/atomic-file.js';
import { tempDir } from '../../../helpers/daemon.js';

/** `n` chunks of 64 KiB, each filled with its index, produced on demand. */
function chunks(n: number): Readable {
  let i = 0;
  return new Readable({
    highWaterMark: 1 << 16,
    read() {
      this.push(i < n ? Buffer.alloc(1 << 16, i++) : null);
    },
  });
}

/** Takes `room` bytes, then fails every write with ENOSPC, as a full disk does. */
function fullAfter(room: number): Writable & { taken: number } {
  const w = new Writable({
    write(chunk: Buffer, _enc, cb) {
      if (w.taken + chunk.length > room)
        return cb(Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' }));
      w.taken += chunk.length;
      cb();
    },
  }) as Writable & { taken: number };
  w.taken = 0;
  return w;
}

describe('adapters/fs-kit/atomic-file', () => {
  it('writes a stream in place, with its mode, and leaves no temp file', async () => {
    const dir = tempDir();
    const path = join(dir, 'f.bin');
    await writeFileAtomic(path, chunks(20), { mode: 0o640 });
    const got = readFileSync(path);
    expect(got.length).to.equal(20 << 16);
    expect(got[(19 << 16) + 5]).to.equal(19);
    expect(statSync(path).mode & 0o777).to.equal(0o640);
    expect(readdirSync(dir)).to.deep.equal(['f.bin']);
  });

  it('leaves the source whole and paused when the write fails, so its owner can read the rest (an HTTP body on a kept-alive socket)', async () => {
    const src = chunks(16);
    const sink = fullAfter(3 << 16);
    const err = await copyInto(src, sink).then(
      () => undefined,
      (e: NodeJS.ErrnoException) => e,
    );
    expect(err?.code).to.equal('ENOSPC');
    expect(src.destroyed).to.equal(false);
    expect(src.isPaused()).to.equal(true);
    expect(sink.destroyed).to.equal(true);
    // what the caller does (NodeGuestFiles.writeFile, drainBody): read on to the end
    let rest = 0;
    src.on('data', (c: Buffer) => (rest += c.length)).resume();
    await new Promise((r) => src.once('end', r));
    expect(sink.taken + rest).to.be.at.most(16 << 16);
    expect(sink.taken + rest).to.be.at.least((16 << 16) - (4 << 16)); // at most what was in flight is lost
  });

  it('fails, with no temp file left, when the source is cut off before its end', async () => {
    const dir = tempDir();
    let i = 0;
    const src = new Readable({
      read() {
        if (i++ < 3) this.push(Buffer.alloc(1000, 1));
        else this.destroy();
      },
    });
    const err = await writeFileAtomic(join(dir, 'cut.bin'), src).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).to.match(/closed before its end/);
    expect(readdirSync(dir)).to.deep.equal([]);
    expect(existsSync(join(dir, 'cut.bin'))).to.equal(false);
  });

  it('passes on an error of the source', async () => {
    const src = new Readable({
      read() {
        this.destroy(new Error('the peer went away'));
      },
    });
    const err = await copyInto(src, fullAfter(1 << 20)).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).to.equal('the peer went away');
  });
});
