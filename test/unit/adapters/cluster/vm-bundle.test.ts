import { expect } from 'chai';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import tar from 'tar-stream';
import { packVm, unpackVm } from '../../../../src/adapters/cluster/vm-bundle.js';
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
