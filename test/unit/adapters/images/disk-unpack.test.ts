import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { readyDisk, unpackDisk, untarDisk } from '../../../../src/adapters/images/disk-unpack.js';
import { InvalidArgumentError } from '../../../../src/domain/errors.js';

/** A raw disk as sniffImportFile knows one: an MBR's signature, then zeros. */
function rawDisk(bytes: number): Buffer {
  const b = Buffer.alloc(bytes);
  b[510] = 0x55;
  b[511] = 0xaa;
  b.write('the rest of the disk', 4096);
  return b;
}

describe('adapters/images/unpackDisk and untarDisk (a disk shipped compressed, or in a tar)', function () {
  // tens of MiB written and packed with xz: seconds on a loaded host
  this.timeout(30_000);
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

  it('unpacks zstd and bzip2 with their tools, and says a file that is not whole', async () => {
    const disk = rawDisk(1 << 20);
    const raw = join(dir, 'disk.raw');
    writeFileSync(raw, disk);
    execFileSync('zstd', ['-q', '-k', raw]);
    execFileSync('bzip2', ['-k', raw]);
    for (const packed of [`${raw}.zst`, `${raw}.bz2`]) {
      const out = await unpack(packed);
      expect(readFileSync(out).equals(disk), packed).to.equal(true);
      rmSync(out);
    }
    writeFileSync(join(dir, 'cut.zst'), readFileSync(`${raw}.zst`).subarray(0, 40));
    expect(((await unpack(join(dir, 'cut.zst')).catch((e: Error) => e)) as Error).message).to.match(
      /^from: disk:x is not a whole zstd file: .+/,
    );
  });

  it("takes a tar's one disk out (GCE's disk.raw in a .tar.gz, sparse as GNU tar -S makes it), and leaves the work folder with the disk alone", async () => {
    const src = join(dir, 'src');
    mkdirSync(src);
    const disk = rawDisk(2 << 20);
    writeFileSync(join(src, 'disk.raw'), disk);
    // as GCE's documentation makes one: tar --format=oldgnu -Sczf
    execFileSync('tar', ['--format=oldgnu', '-Sczf', join(dir, 'image.tar.gz'), '-C', src, 'disk.raw']);
    const work = join(dir, 'work');
    mkdirSync(work);
    const got = await readyDisk({ type: 'disk', file: join(dir, 'image.tar.gz') }, work, () => undefined);
    expect(got.label).to.equal('disk:image.tar.gz');
    expect(readFileSync(got.file).equals(disk)).to.equal(true);
    // what came between (the unpacked tar) is gone; the host's file is never touched
    expect(readdirSync(work)).to.deep.equal(['untarred']);
    expect(existsSync(join(dir, 'image.tar.gz'))).to.equal(true);
    // a plain tar, its disk in a folder
    mkdirSync(join(src, 'img'));
    writeFileSync(join(src, 'img', 'disk.img'), disk);
    execFileSync('tar', ['-cf', join(dir, 'plain.tar'), '-C', src, 'img']);
    const into = join(dir, 'w2');
    mkdirSync(into);
    const out = await untarDisk(join(dir, 'plain.tar'), into, 'disk:plain.tar', room);
    expect(out).to.equal(join(into, 'untarred', 'img', 'disk.img'));
    expect(statSync(out).size).to.equal(disk.length);
    expect(await untarDisk(join(src, 'disk.raw'), into, 'disk:x', room), 'not a tar: the file itself').to.equal(
      join(src, 'disk.raw'),
    );
  });

  it('refuses a tar that is not one disk: two files, a link, a name that climbs out, one over the bound; nothing is taken out', async () => {
    const src = join(dir, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'a.raw'), rawDisk(4096));
    writeFileSync(join(src, 'b.raw'), rawDisk(4096));
    symlinkSync('/etc/passwd', join(src, 'link.raw'));
    writeFileSync(join(src, 'big.raw'), rawDisk(5 << 20));
    const tarOf = (name: string, ...args: string[]) => {
      execFileSync('tar', ['-cf', join(dir, name), '-C', src, ...args]);
      return join(dir, name);
    };
    const refused = async (file: string) => {
      const into = mkdtempSync(join(dir, 'into-'));
      const err = await untarDisk(file, into, 'disk:t', room).catch((e: unknown) => e);
      expect(err, file).to.be.instanceOf(InvalidArgumentError);
      expect(existsSync(join(into, 'untarred')), `${file}: nothing taken out`).to.equal(false);
      return (err as Error).message;
    };
    expect(await refused(tarOf('two.tar', 'a.raw', 'b.raw'))).to.equal(
      'from: disk:t is a tar; a tar of a disk holds one file (directories aside), this one 2 entries',
    );
    expect(await refused(tarOf('link.tar', 'link.raw'))).to.match(
      /holds one file \(directories aside\), this one 1 entries/,
    );
    expect(await refused(tarOf('big.tar', 'big.raw'))).to.equal(
      'from: disk:t is a tar; its disk is 5.0 MiB, more than 4.0 MiB (the test)',
    );
    execFileSync('tar', ['-cf', join(dir, 'climb.tar'), '-P', '--transform', 's|^|../|', '-C', src, 'a.raw']);
    expect(await refused(join(dir, 'climb.tar'))).to.equal(
      'from: disk:t is a tar; its file\'s name "../a.raw" is not one svc takes',
    );
  });
});
