import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { unpackDisk } from '../../../../src/adapters/images/disk-unpack.js';
import { InvalidArgumentError } from '../../../../src/domain/errors.js';

/** A raw disk as sniffImportFile knows one: an MBR's signature, then zeros. */
function rawDisk(bytes: number): Buffer {
  const b = Buffer.alloc(bytes);
  b[510] = 0x55;
  b[511] = 0xaa;
  b.write('the rest of the disk', 4096);
  return b;
}

describe('adapters/images/unpackDisk (a disk shipped as .xz or .gz)', () => {
  let dir: string;
  const room = { bytes: 4 << 20, why: 'the test' };
  const unpack = (file: string, r = room) => unpackDisk(file, dir, 'disk:x', r, () => undefined);
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'svc-unpack-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('unpacks gzip and xz (with the xz tool) into the work folder, and leaves a disk that is not packed as it is', async () => {
    const disk = rawDisk(1 << 20);
    const gz = join(dir, 'disk.img.gz');
    writeFileSync(gz, gzipSync(disk));
    const fromGz = await unpack(gz);
    expect(fromGz).to.equal(join(dir, 'disk.unpacked'));
    expect(readFileSync(fromGz).equals(disk)).to.equal(true);
    const raw = join(dir, 'disk.raw');
    writeFileSync(raw, disk);
    execFileSync('xz', ['-k', '-0', raw]);
    rmSync(fromGz);
    const fromXz = await unpack(`${raw}.xz`);
    expect(readFileSync(fromXz).equals(disk)).to.equal(true);
    expect(await unpack(raw), 'not packed: the file itself').to.equal(raw);
  });

  it('stops at the bound as the disk comes out (a small file of zeros unpacks a thousandfold), and refuses a broken file', async () => {
    const bomb = join(dir, 'bomb.gz');
    writeFileSync(bomb, gzipSync(rawDisk(16 << 20)));
    expect(readFileSync(bomb).length).to.be.below(64 << 10);
    const err = await unpack(bomb).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(InvalidArgumentError);
    expect((err as Error).message).to.equal(
      'from: disk:x unpacks to more than 4.0 MiB (the test); the unpacking was stopped',
    );
    const xzBomb = join(dir, 'bomb.raw');
    writeFileSync(xzBomb, rawDisk(16 << 20));
    execFileSync('xz', ['-0', xzBomb]);
    expect(((await unpack(`${xzBomb}.xz`).catch((e: Error) => e)) as Error).message).to.match(/unpacks to more than/);
    const cut = join(dir, 'cut.gz');
    writeFileSync(cut, gzipSync(rawDisk(1 << 20)).subarray(0, 500));
    expect(((await unpack(cut).catch((e: Error) => e)) as Error).message).to.match(
      /^from: disk:x is not a whole gzip file: /,
    );
    // a host without xz: an error of the host's (a 500 that says so), not a 400 and not a crash
    const path = process.env.PATH;
    process.env.PATH = join(dir, 'no-tools-here');
    try {
      const noXz = await unpack(`${xzBomb}.xz`).catch((e: Error) => e);
      expect(noXz).to.not.be.instanceOf(InvalidArgumentError);
      expect((noXz as Error).message).to.equal('xz could not be run: spawn xz ENOENT');
    } finally {
      process.env.PATH = path;
    }
    const badXz = join(dir, 'bad.xz');
    writeFileSync(badXz, Buffer.concat([Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]), Buffer.alloc(100, 1)]));
    expect(((await unpack(badXz).catch((e: Error) => e)) as Error).message).to.match(
      /^from: disk:x is not a whole xz file: .+/,
    );
  });
});
