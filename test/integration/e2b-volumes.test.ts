import { expect } from 'chai';
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Sandbox, Template, Volume } from 'e2b';
import { call } from '../helpers/http.js';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { e2bOptions } from '../helpers/e2b.js';

/**
 * E2B's volumes through the official SDK (`Volume`) against svcd on the fake hypervisor. The
 * volume content API works on the host's folder of the volume; a guest writes there too (through
 * its share), so links a guest could make are made here by hand and must never be followed.
 */
describe('E2B API: volumes with the official SDK (local agents)', function () {
  this.timeout(60_000);
  let d: TestDaemon;
  let outside: string;
  const opts = () => e2bOptions(d);
  const volumesDir = () => `${d.config.data_dir}-e2b-volumes`;

  before(async () => {
    d = await startTestDaemon({ fake_agent: true });
    outside = tempDir('svc-e2b-outside-');
    writeFileSync(join(outside, 'secret.txt'), 'host only\n');
  });
  after(async () => d.stop());

  it('makes, lists, finds and deletes volumes, one per name', async () => {
    const v = await Volume.create('data', opts());
    expect(v.volumeId).to.match(/^vol-[0-9a-f]{12}$/);
    expect(v.token).to.match(/^[0-9a-f]{48}$/);
    expect((await Volume.list(opts())).map((x) => x.name)).to.deep.equal(['data']);
    expect((await Volume.getInfo('data', opts())).volumeId, 'by name').to.equal(v.volumeId);
    expect((await Volume.connect(v.volumeId, opts())).token).to.equal(v.token);
    expect(existsSync(join(volumesDir(), v.volumeId))).to.equal(true);
    const twice = await Volume.create('data', opts()).catch((e: unknown) => e);
    expect((twice as Error).message).to.match(/volume data exists/);
    const bad = await Volume.create('../x', opts()).catch((e: unknown) => e);
    expect((bad as Error).message).to.match(/volume name/);
    const gone = await Volume.create('gone', opts());
    expect(await Volume.destroy(gone.volumeId, opts())).to.equal(true);
    expect(await Volume.destroy(gone.volumeId, opts()), 'a second delete finds nothing').to.equal(false);
    expect(existsSync(join(volumesDir(), gone.volumeId))).to.equal(false);
  });

  it('reads and writes what a volume holds: files, folders, listings, metadata, removal', async () => {
    const v = await Volume.connect((await Volume.getInfo('data', opts())).volumeId, opts());
    const o = opts();
    await v.writeFile('/docs/a.txt', 'hello', o);
    expect(await v.readFile('/docs/a.txt', o)).to.equal('hello');
    const bytes = Buffer.from([0, 1, 2, 255]);
    await v.writeFile('/bin.dat', new Uint8Array(bytes).buffer, o);
    expect(Buffer.from(await v.readFile('/bin.dat', { ...o, format: 'bytes' })).equals(bytes)).to.equal(true);
    await v.writeFile('/empty', '', o);
    expect(await v.readFile('/empty', o)).to.equal('');
    await v.remove('/empty', o);
    const info = await v.getInfo('/docs/a.txt', o);
    expect(info).to.include({ name: 'a.txt', path: '/docs/a.txt', type: 'file', size: 5 });
    expect(info.mtime).to.be.instanceOf(Date);
    const again = await v.writeFile('/docs/a.txt', 'replaced', o).catch((e: unknown) => e);
    expect((again as Error).message, 'an existing file is replaced only with force').to.match(/exists/);
    await v.writeFile('/docs/a.txt', 'replaced', { ...o, force: true });
    expect(await v.readFile('/docs/a.txt', o)).to.equal('replaced');

    await v.makeDir('/x/y/z', { ...o, force: true });
    const dup = await v.makeDir('/x', o).catch((e: unknown) => e);
    expect((dup as Error).message).to.match(/exists/);
    expect((await v.list('/', o)).map((e) => [e.name, e.type])).to.deep.equal([
      ['bin.dat', 'file'],
      ['docs', 'directory'],
      ['x', 'directory'],
    ]);
    expect((await v.list('/x', { ...o, depth: 3 })).map((e) => e.path)).to.deep.equal(['/x/y', '/x/y/z']);
    const meta = await v.updateMetadata('/docs/a.txt', { mode: 0o600 }, o);
    expect(meta.mode).to.equal(0o600);
    expect(await v.exists('/docs/a.txt', o)).to.equal(true);
    await v.remove('/docs', o);
    expect(await v.exists('/docs/a.txt', o)).to.equal(false);
    expect(await v.exists('/docs', o)).to.equal(false);
    const missing = await v.readFile('/nope', o).catch((e: unknown) => e);
    expect((missing as Error).constructor.name).to.equal('VolumePathNotFoundError');
  });

  it('never follows a link a guest made in a volume, and takes only the volume token', async () => {
    const v = await Volume.connect((await Volume.getInfo('data', opts())).volumeId, opts());
    const o = opts();
    const root = join(volumesDir(), v.volumeId);
    symlinkSync(join(outside, 'secret.txt'), join(root, 'leak'));
    symlinkSync(outside, join(root, 'out'));
    const read = await v.readFile('/leak', o).catch((e: unknown) => e);
    expect((read as Error).message).to.match(/is a link/);
    const through = await v.readFile('/out/secret.txt', o).catch((e: unknown) => e);
    expect((through as Error).message).to.match(/\/out is not a folder \(links are not followed\)/);
    const listed = await v.list('/out', o).catch((e: unknown) => e);
    expect(listed).to.be.instanceOf(Error);
    const written = await v.writeFile('/out/planted.txt', 'x', o).catch((e: unknown) => e);
    expect(written).to.be.instanceOf(Error);
    expect(existsSync(join(outside, 'planted.txt')), 'nothing written outside').to.equal(false);
    const chmod = await v.updateMetadata('/leak', { mode: 0o777 }, o).catch((e: unknown) => e);
    expect(chmod).to.be.instanceOf(Error);
    // the link is listed as a link, with its target, and removing it leaves its target alone
    const link = (await v.list('/', o)).find((e) => e.name === 'leak')!;
    expect(link).to.include({ type: 'symlink', target: join(outside, 'secret.txt') });
    await v.remove('/leak', o);
    await v.remove('/out', o);
    expect(readFileSync(join(outside, 'secret.txt'), 'utf8')).to.equal('host only\n');
    // a folder holding a link to a folder outside: removed, and the outside kept whole
    mkdirSync(join(root, 'tree'));
    symlinkSync(outside, join(root, 'tree', 'link'));
    await v.remove('/tree', o);
    expect(readFileSync(join(outside, 'secret.txt'), 'utf8')).to.equal('host only\n');

    const port = { port: d.tcp.port };
    const path = `/e2b/volumecontent/${v.volumeId}/file?path=/bin.dat`;
    expect((await call(port, 'GET', path)).status, 'no token').to.equal(401);
    expect((await call(port, 'GET', path, undefined, { authorization: `Bearer ${'0'.repeat(48)}` })).status).to.equal(
      401,
    );
    expect((await call(port, 'GET', path, undefined, { authorization: `Bearer ${v.token}` })).status).to.equal(200);
    const dots = await call(port, 'GET', `/e2b/volumecontent/${v.volumeId}/file?path=../../etc/passwd`, undefined, {
      authorization: `Bearer ${v.token}`,
    });
    expect(dots.status).to.equal(400);
  });

  it('mounts volumes in sandboxes at the paths they name, and keeps a mounted volume from being deleted', async () => {
    const v = await Volume.connect((await Volume.getInfo('data', opts())).volumeId, opts());
    const s = await Sandbox.create({ ...opts(), volumeMounts: { '/mnt/data': v, '/mnt/again': 'data' } });
    try {
      const vm = (await d.call('GET', `/vms/${s.sandboxId}`)).json;
      expect(vm.mounts.map((m: { guest: string; tag: string }) => [m.guest, m.tag])).to.deep.equal([
        ['/mnt/data', `${v.volumeId}-0`],
        ['/mnt/again', `${v.volumeId}-1`],
      ]);
      expect((await s.getInfo()).volumeMounts).to.deep.equal([
        { name: 'data', path: '/mnt/data' },
        { name: 'data', path: '/mnt/again' },
      ]);
      const busy = await Volume.destroy(v.volumeId, opts()).catch((e: unknown) => e);
      expect((busy as Error).message).to.match(new RegExp(`mounted in ${s.sandboxId}`));
    } finally {
      await s.kill();
    }
    const unknown = await Sandbox.create({ ...opts(), volumeMounts: { '/mnt/x': 'no-such' } }).catch((e: unknown) => e);
    expect((unknown as Error).message).to.match(/volume no-such not found/);
    // A sandbox of a built template is a clone of a suspended VM: the volume is added as it wakes.
    await Template.build(Template().fromBaseImage().runCmd('true'), 'vol-tpl', opts());
    const clone = await Sandbox.create('vol-tpl', { ...opts(), volumeMounts: { '/mnt/data': 'data' } });
    try {
      const vm = (await d.call('GET', `/vms/${clone.sandboxId}`)).json;
      expect(vm.from).to.be.a('string');
      expect(vm.mounts.map((m: { guest: string; tag: string }) => [m.guest, m.tag])).to.deep.equal([
        ['/mnt/data', `${v.volumeId}-0`],
      ]);
      expect((await clone.getInfo()).volumeMounts).to.deep.equal([{ name: 'data', path: '/mnt/data' }]);
    } finally {
      await clone.kill();
    }
    expect(await Volume.destroy(v.volumeId, opts())).to.equal(true);
  });
});
