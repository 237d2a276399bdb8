import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  existsSync,
  linkSync,
  mkdirSync,
  ftruncateSync,
  openSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import tar from 'tar-stream';
import { packVm, unpackVm } from '../../../../src/adapters/cluster/vm-bundle.js';
import { InvalidArgumentError } from '../../../../src/domain/errors.js';
import type { MoveOffer } from '../../../../src/domain/move.js';
import type { VmRecord } from '../../../../src/domain/vm.js';
import { tempDir } from '../../../helpers/daemon.js';

const offer = (o: Partial<VmRecord> = {}): MoveOffer => ({
  from: 'n1',
  image_digest: 'sha256:00',
  record: {
    name: 'box',
    status: 'stopped',
    cpus: 1,
    memory_mb: 128,
    disk_gb: 1,
    image: 'minimal',
    forwards: [],
    mounts: [],
    egress: { mode: 'allow', allow: [], deny: [] },
    ...o,
  } as unknown as VmRecord,
});

/** A tar of hand-made entries, as a hostile sender would make it. */
function tarOf(entries: { header: Partial<tar.Header> & { name: string }; body?: Buffer }[]): Readable {
  const pack = tar.pack();
  for (const e of entries) pack.entry(e.header as tar.Header, e.body ?? Buffer.alloc(0));
  pack.finalize();
  return Readable.from(pack as unknown as AsyncIterable<Buffer>);
}
const offerEntry = (o: MoveOffer = offer()) => {
  const body = Buffer.from(JSON.stringify(o));
  return { header: { name: 'offer.json', size: body.length }, body };
};

describe('adapters/cluster/vm-bundle: a moved VM as one tar', () => {
  it('carries the offer and every file, byte for byte, empty ones too', async () => {
    const src = tempDir('svc-bundle-src-');
    writeFileSync(join(src, 'disk.qcow2'), Buffer.alloc(300_000, 7));
    writeFileSync(join(src, 'empty'), '');
    writeFileSync(join(src, 'serial.log'), 'booted\n');
    const files = ['disk.qcow2', 'empty', 'serial.log'].map((name) => ({
      name,
      path: join(src, name),
      size: readFileSync(join(src, name)).length,
    }));
    const dst = tempDir('svc-bundle-dst-');
    const got = await unpackVm(
      Readable.from(packVm(offer(), files) as unknown as AsyncIterable<Buffer>),
      async (o, fill) => {
        await fill(dst);
        return o;
      },
    );
    expect(got.record.name).to.equal('box');
    expect(readdirSync(dst).sort()).to.deep.equal(['disk.qcow2', 'empty', 'serial.log']);
    for (const f of files) expect(readFileSync(join(dst, f.name)).equals(readFileSync(f.path))).to.equal(true);
  });

  it('carries the snapshots folder as paths, a file it holds twice (hard links) once, and links it again', async () => {
    const src = tempDir('svc-bundle-src-');
    mkdirSync(join(src, 'snapshots', 'before'), { recursive: true });
    writeFileSync(join(src, 'disk.qcow2'), randomBytes(200_000));
    writeFileSync(join(src, 'layer-1.qcow2'), randomBytes(300_000));
    linkSync(join(src, 'layer-1.qcow2'), join(src, 'snapshots', 'before', 'layer-1.qcow2'));
    writeFileSync(join(src, 'snapshots', 'before', 'snapshot.json'), '{"layer":"layer-1.qcow2"}');
    const files = [
      'disk.qcow2',
      'layer-1.qcow2',
      'snapshots/before/layer-1.qcow2',
      'snapshots/before/snapshot.json',
    ].map((name) => ({ name, path: join(src, name), size: statSync(join(src, name)).size }));
    let sent = 0;
    const counted = Readable.from(
      (async function* () {
        for await (const c of packVm(offer(), files) as unknown as AsyncIterable<Buffer>) {
          sent += c.length;
          yield c;
        }
      })(),
    );
    const dst = tempDir('svc-bundle-dst-');
    await unpackVm(counted, (_o, fill) => fill(dst));
    for (const f of files) expect(readFileSync(join(dst, f.name)).equals(readFileSync(f.path)), f.name).to.equal(true);
    expect(sent, 'the layer crossed once').to.be.below(200_000 + 300_000 + 64 * 1024);
    const [a, b] = ['layer-1.qcow2', 'snapshots/before/layer-1.qcow2'].map((n) => statSync(join(dst, n)));
    expect(a.ino, 'one file, two names, as it was').to.equal(b.ino);
    expect(a.nlink).to.equal(2);
  });

  it('refuses links to what it did not send, paths outside the snapshots folder and a name twice', async () => {
    const file = (name: string) => ({ header: { name, size: 1 }, body: Buffer.from('x') });
    const link = (name: string, linkname: string) => ({ header: { name, type: 'link' as const, linkname } });
    const cases: [Readable, RegExp][] = [
      [
        tarOf([offerEntry(), link('snapshots/a/x', '/etc/passwd')]),
        /links snapshots\/a\/x only to a file it sent before/,
      ],
      [
        tarOf([offerEntry(), link('snapshots/a/x', 'disk.qcow2')]),
        /only to a file it sent before; refused "disk.qcow2"/,
      ],
      [tarOf([offerEntry(), file('snapshots/a/b/c')]), /plain files with plain names/],
      [tarOf([offerEntry(), file('other/a')]), /plain files with plain names/],
      [tarOf([offerEntry(), file('snapshots/../a')]), /plain files with plain names/],
      [tarOf([offerEntry(), file('disk.qcow2'), file('disk.qcow2')]), /names disk.qcow2 twice/],
      [tarOf([offerEntry(), file('disk.qcow2'), link('disk.qcow2', 'disk.qcow2')]), /names disk.qcow2 twice/],
      // A name that is a file and a folder: refused as the sender's fault, not failed on the disk.
      [tarOf([offerEntry(), file('snapshots'), file('snapshots/a/x')]), /names snapshots\/a\/x both as a file and/],
      [tarOf([offerEntry(), file('snapshots/a/y'), file('snapshots/a')]), /names snapshots\/a both as a file and/],
      [
        tarOf([offerEntry(), file('snapshots/a'), link('snapshots/a/x', 'snapshots/a')]),
        /names snapshots\/a\/x both as a file and/,
      ],
    ];
    for (const [body, msg] of cases) {
      const dst = tempDir('svc-bundle-bad-');
      const err = await unpackVm(body, (_o, fill) => fill(dst)).then(
        () => undefined,
        (e: Error) => e,
      );
      expect(err?.message, String(msg)).to.match(msg);
      expect(err, String(msg)).to.be.instanceOf(InvalidArgumentError);
      expect(existsSync(join(dst, 'snapshots', 'a', 'x')), 'no link made').to.equal(false);
    }
  });

  it('refuses what is not a moved VM before writing a byte of it', async () => {
    const cases: [Readable, RegExp][] = [
      [Readable.from([Buffer.from('not a tar at all')]), /not the tar of a moved vm|must begin with offer.json/],
      [tarOf([{ header: { name: 'disk.qcow2', size: 1 }, body: Buffer.from('x') }]), /must begin with offer.json/],
      [tarOf([{ header: { name: 'offer.json', size: 5 }, body: Buffer.from('{nope') }]), /offer.json is not JSON/],
      [
        tarOf([offerEntry(), { header: { name: '../escape', size: 1 }, body: Buffer.from('x') }]),
        /plain files with plain names/,
      ],
      [
        tarOf([offerEntry(), { header: { name: 'sub/file', size: 1 }, body: Buffer.from('x') }]),
        /plain files with plain names/,
      ],
      [
        tarOf([offerEntry(), { header: { name: 'link', type: 'symlink', linkname: '/etc/passwd' } }]),
        /plain files with plain names/,
      ],
      [
        tarOf([offerEntry(), { header: { name: 'offer.json', size: 2 }, body: Buffer.from('{}') }]),
        /plain files with plain names/,
      ],
    ];
    for (const [body, msg] of cases) {
      const dst = tempDir('svc-bundle-bad-');
      let filled = false;
      const err = await unpackVm(body, async (_o, fill) => {
        filled = true;
        await fill(dst);
      }).then(
        () => undefined,
        (e: Error) => e,
      );
      expect(err?.message, String(msg)).to.match(msg);
      expect(readdirSync(dst)).to.deep.equal([]);
      if (/offer.json/.test(String(msg)) && !/plain/.test(String(msg))) expect(filled).to.equal(false);
    }
  });

  it('refuses more bytes than the VM’s disk and memory hold, from the headers, before writing them', async () => {
    const dst = tempDir('svc-bundle-big-');
    // 1 GiB disk, 128 MiB memory: the limit is 1.5 GiB; a header saying 2 GiB is refused as it comes.
    const pack = tar.pack();
    const o = Buffer.from(JSON.stringify(offer()));
    pack.entry({ name: 'offer.json', size: o.length }, o);
    const big = pack.entry({ name: 'disk.qcow2', size: 2 * 1024 ** 3 });
    big.write(Buffer.alloc(1024));
    const err = await unpackVm(Readable.from(pack as unknown as AsyncIterable<Buffer>), (_o, fill) => fill(dst)).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).to.match(/files pass \d+ bytes, more than its disk and memory can hold/);
    expect(readdirSync(dst)).to.deep.equal([]);
    big.destroy();
    pack.destroy();
  });
});

describe('adapters/cluster/vm-bundle: files with holes (a RAM image)', () => {
  /** A file of `size` bytes, holes but for `data` written at its offsets. */
  const holeyFile = (dir: string, name: string, size: number, data: [number, Buffer][]) => {
    const path = join(dir, name);
    const fd = openSync(path, 'w');
    ftruncateSync(fd, size);
    for (const [at, b] of data) writeSync(fd, b, 0, b.length, at);
    closeSync(fd);
    return { name, path, size };
  };
  const moved = async (files: { name: string; path: string; size: number }[]) => {
    const pack = packVm(offer({ memory_mb: 64 }), files);
    let sent = 0;
    const counted = Readable.from(
      (async function* () {
        for await (const c of pack as unknown as AsyncIterable<Buffer>) {
          sent += c.length;
          yield c;
        }
      })(),
    );
    const dst = tempDir('svc-bundle-dst-');
    await unpackVm(counted, (_o, fill) => fill(dst));
    return { dst, sent };
  };

  it('sends only the extents that hold data, and the file lands the same, with holes', async () => {
    const src = tempDir('svc-bundle-src-');
    const size = 32 * 1024 * 1024;
    const a = randomBytes(100_000);
    const b = randomBytes(5000);
    const f = holeyFile(src, 'state.ram', size, [
      [0, a],
      [20 * 1024 * 1024 + 7, b],
      [size - 3, Buffer.from('end')],
    ]);
    expect(statSync(f.path).blocks * 512, 'made with holes').to.be.below(size);
    const { dst, sent } = await moved([f]);
    const got = readFileSync(join(dst, 'state.ram'));
    expect(got.length).to.equal(size);
    expect(got.equals(readFileSync(f.path)), 'byte for byte').to.equal(true);
    expect(sent, 'the tar carries the data blocks, not the holes').to.be.below(1024 * 1024);
    expect(statSync(join(dst, 'state.ram')).blocks * 512, 'holes where it lands').to.be.below(2 * 1024 * 1024);
  });

  it('sends a file without holes as it is', async () => {
    const src = tempDir('svc-bundle-src-');
    writeFileSync(join(src, 'disk.qcow2'), randomBytes(2 * 1024 * 1024));
    const { dst, sent } = await moved([{ name: 'disk.qcow2', path: join(src, 'disk.qcow2'), size: 2 * 1024 * 1024 }]);
    expect(readFileSync(join(dst, 'disk.qcow2')).equals(readFileSync(join(src, 'disk.qcow2')))).to.equal(true);
    expect(sent).to.be.above(2 * 1024 * 1024);
  });

  /** A sparse entry made by hand: records (offset, length) and their bytes. */
  const sparseEntry = (name: string, size: number | string, parts: [number, number, Buffer?][], cut = 0) => {
    const chunks: Buffer[] = [];
    for (const [offset, length, data] of parts) {
      const rec = Buffer.alloc(16);
      rec.writeBigUInt64BE(BigInt(offset), 0);
      rec.writeBigUInt64BE(BigInt(length), 8);
      chunks.push(rec, data ?? Buffer.alloc(length, 1));
    }
    const body = Buffer.concat(chunks).subarray(0, Buffer.concat(chunks).length - cut);
    return { header: { name, size: body.length, pax: { 'SVC.sparse': String(size) } }, body };
  };
  const refused = async (entry: ReturnType<typeof sparseEntry>) => {
    const dst = tempDir('svc-bundle-dst-');
    const err = await unpackVm(tarOf([offerEntry(offer({ memory_mb: 64 })), entry]), (_o, fill) => fill(dst)).catch(
      (e: Error) => e,
    );
    expect(readdirSync(dst), 'nothing left of it').to.deep.equal([]);
    return err as Error & { code?: string };
  };

  it('refuses sparse entries that are not one, and leaves no file of them', async () => {
    const mb = 1024 * 1024;
    expect(
      (
        await refused(
          sparseEntry('a', mb, [
            [0, 10],
            [5, 10],
          ]),
        )
      ).message,
    ).to.match(/out of order or overlapping/);
    expect((await refused(sparseEntry('a', mb, [[mb - 5, 10]]))).message).to.match(/past its/);
    expect((await refused(sparseEntry('a', mb, [[0, 0]]))).message).to.match(/not one/);
    expect((await refused(sparseEntry('a', mb, [[0, 100]], 10))).message).to.match(/cut short/);
    expect((await refused(sparseEntry('a', 'lots', [[0, 1]]))).message).to.match(/no size of its own/);
    // Its own size counts toward what the VM can hold, though its holes take nothing to send.
    const big = await refused(sparseEntry('a', 3 * 1024 * mb, [[0, 1]]));
    expect(big.code).to.equal('payload_too_large');
  });
});
