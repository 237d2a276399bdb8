import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import express from 'express';
import { HttpPeerNodes } from '../../src/adapters/cluster/http-peer-nodes.js';
import { ImageCatalog } from '../../src/adapters/images/image-catalog.js';
import type { NodeView } from '../../src/domain/cluster.js';
import { checkBundle } from '../../src/domain/image-fetch.js';
import { tempDir } from '../helpers/daemon.js';

/**
 * An image fetched from another node with real files over real HTTP (docs/cluster.md, "Images
 * across nodes"): each file checked by its sha256 and the image by its digest, a fetch cut off
 * resumed with a Range, and what does not match never installed.
 */
describe('images across nodes: the fetch, file by file', function () {
  this.timeout(30_000);
  let server: Server;
  let node: NodeView;
  const ranges: string[] = [];
  const source = new ImageCatalog(tempDir('svc-fetch-src-'));
  const disk = randomBytes(3 * 1024 * 1024 + 17);
  const peers = new HttpPeerNodes({ self: 'n2', token: 't' });

  before(async () => {
    const dir = join(source.root, 'app');
    mkdirSync(dir);
    const manifest = { id: 'app', format: 1, kernel: 'vmlinux', initrd: 'initrd.img', disk: 'disk.qcow2', disk_gb: 1 };
    writeFileSync(
      join(dir, 'manifest.json'),
      JSON.stringify({ ...manifest, cmdline: '', ssh_user: 'root', agent_ready: true }),
    );
    writeFileSync(join(dir, 'disk.qcow2'), disk);
    writeFileSync(join(dir, 'vmlinux'), randomBytes(50_000));
    writeFileSync(join(dir, 'initrd.img'), Buffer.alloc(0));
    const app = express();
    app.get('/cluster/images/:id/files/:file', async (req, res) => {
      ranges.push(`${req.params.file} ${req.headers.range ?? 'whole'}`);
      const { paths } = await source.bundle(req.params.id);
      res.sendFile(paths[req.params.file], { dotfiles: 'allow' });
    });
    server = createServer(app);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    node = { node: 'n1', advertise: `http://127.0.0.1:${(server.address() as AddressInfo).port}` } as NodeView;
  });
  after(() => new Promise<void>((r) => server.close(() => r())));

  it('resumes a file a fetch cut off with a Range, checks every hash, and installs the image whole', async () => {
    const bundle = checkBundle(JSON.parse(JSON.stringify(await source.bundle('app'))), 'app');
    expect(bundle.files.map((f) => f.name)).to.deep.equal(['manifest.json', 'disk.qcow2', 'vmlinux', 'initrd.img']);
    const here = new ImageCatalog(tempDir('svc-fetch-dst-'));
    // What an earlier fetch left: half the disk.
    mkdirSync(join(here.root, '.fetch-app'));
    writeFileSync(join(here.root, '.fetch-app', 'disk.qcow2'), disk.subarray(0, 1_000_000));
    ranges.length = 0;
    await here.installImage(bundle, (dir) => peers.fetchImageFiles(node, bundle, dir));
    // The empty initrd is made, not asked for.
    expect(ranges).to.deep.equal(['manifest.json whole', 'disk.qcow2 bytes=1000000-', 'vmlinux whole']);
    expect(readFileSync(join(here.root, 'app', 'disk.qcow2')).equals(disk)).to.equal(true);
    expect(await here.digest('app'))
      .to.equal(bundle.digest)
      .and.to.equal(await source.digest('app'));
    expect(existsSync(join(here.root, '.fetch-app'))).to.equal(false);
    expect(here.info('app')).to.include({ id: 'app', built: true });
    const again = await here.installImage(bundle, async () => undefined).catch((e: Error) => e.message);
    expect(again).to.match(/image app is built here already/);
  });

  it('installs nothing when a file is not what was offered, and starts over the next time', async () => {
    const bundle = checkBundle(JSON.parse(JSON.stringify(await source.bundle('app'))), 'app');
    const here = new ImageCatalog(tempDir('svc-fetch-bad-'));
    mkdirSync(join(here.root, '.fetch-app'));
    // A partial file whose bytes are not the disk's: resumed, it cannot match.
    writeFileSync(join(here.root, '.fetch-app', 'disk.qcow2'), randomBytes(1_000_000));
    const err = await here
      .installImage(bundle, (dir) => peers.fetchImageFiles(node, bundle, dir))
      .catch((e: Error) => e.message);
    expect(err).to.equal('image app as fetched does not match the sha256 of disk.qcow2; nothing was installed');
    expect(existsSync(join(here.root, 'app'))).to.equal(false);
    expect(existsSync(join(here.root, '.fetch-app'))).to.equal(false);
    await here.installImage(bundle, (dir) => peers.fetchImageFiles(node, bundle, dir));
    expect(await here.digest('app')).to.equal(bundle.digest);
    // A bundle that lies about the digest is refused after its files check out.
    const liar = new ImageCatalog(tempDir('svc-fetch-liar-'));
    const lying = { ...bundle, digest: 'sha256:' + '0'.repeat(64) };
    const err2 = await liar
      .installImage(lying, (dir) => peers.fetchImageFiles(node, lying, dir))
      .catch((e: Error) => e.message);
    expect(err2).to.match(/does not have the digest sha256:0+; nothing was installed/);
    expect(existsSync(join(liar.root, 'app'))).to.equal(false);
  });

  it('refuses offers that are not an image’s before fetching anything', () => {
    const ok = { id: 'app', digest: 'sha256:ab', files: [{ name: 'manifest.json', size: 2, sha256: 'a'.repeat(64) }] };
    expect(checkBundle(ok, 'app').files).to.have.length(1);
    const bad: [unknown, RegExp][] = [
      [{ ...ok, id: 'other' }, /does not name it/],
      [{ ...ok, files: [] }, /must list 1 to 16 files/],
      [{ ...ok, files: [{ ...ok.files[0], name: '../etc' }] }, /not one plain name/],
      [{ ...ok, files: [{ ...ok.files[0], name: '.digest' }] }, /not one plain name/],
      [{ ...ok, files: [ok.files[0], ok.files[0]] }, /not one plain name/],
      [{ ...ok, files: [{ ...ok.files[0], size: -1 }] }, /size out of bounds/],
      [{ ...ok, files: [{ ...ok.files[0], sha256: 'x' }] }, /no sha256/],
      [{ ...ok, files: [{ name: 'disk.qcow2', size: 1, sha256: 'a'.repeat(64) }] }, /has no manifest.json/],
    ];
    for (const [b, msg] of bad) expect(() => checkBundle(b, 'app'), String(msg)).to.throw(msg);
  });
});
