import { expect } from 'chai';
import {
  chmodSync,
  existsSync,
  linkSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { backingName } from '../../src/adapters/images/qcow2-backing.js';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { waitUntil } from '../helpers/wait.js';
import { E2E_IMAGES, ensureImage, qemuOfVm } from './image.js';

/**
 * An upgrade of svc with a persistent VM on its built-in image (docs/image.md, "After an upgrade"):
 * the daemon builds the outdated image anew with the real build script while the VM stands on the
 * old build; the VM keeps booting the old build's kernel on its old disk, a new VM gets the new
 * build, and the old build goes when the VM that stood on it is deleted.
 */
describe('svcd with QEMU: a built-in image built anew under a VM that stands on it', function () {
  this.timeout(900_000);
  let d: TestDaemon;
  let images: string;
  const kernelOf = (vm: string) => /-kernel (\S+)/.exec(qemuOfVm(d.config.data_dir, vm) ?? '')?.[1];
  const minimal = async () => {
    // (an error's body has no older_builds either: it must not read as "none kept")
    const r = await d.call('GET', '/images/minimal');
    expect(r.status, r.text).to.equal(200);
    return r.json as Record<string, unknown>;
  };

  before(async () => {
    // An images folder of this test's own (the build writes into it), holding the e2e minimal
    // image's files as links.
    const built = join(E2E_IMAGES, 'minimal');
    ensureImage('minimal');
    images = tempDir('svc-image-builds-');
    chmodSync(images, 0o755); // QEMU runs as nobody (qemu.user)
    mkdirSync(join(images, 'minimal'));
    for (const f of readdirSync(built)) linkSync(join(built, f), join(images, 'minimal', f));
    d = await startTestDaemon({
      hypervisor: 'qemu',
      images_dir: images,
      image: 'minimal',
      memory_mb: 384,
      build_default_image: true,
    });
  });
  after(async () => {
    for (const vm of ['old', 'new']) await d.call('DELETE', `/vms/${vm}`);
    await d.stop();
  });

  it('builds the outdated image anew at start while a VM stands on it; the VM starts again on its own build', async () => {
    const made = await d.call('POST', '/vms', { name: 'old', persistent: true });
    expect(made.status, made.text).to.equal(201);
    expect(kernelOf('old')).to.equal(join(images, 'minimal', 'vmlinux'));
    // as an older svc left it: built from other inputs
    await d.daemon.stop();
    const manifest = join(images, 'minimal', 'manifest.json');
    const { inputs_digest: _was, ...older } = JSON.parse(readFileSync(manifest, 'utf8')) as Record<string, unknown>;
    // a new file, not written through the link: the shared image stays as it is
    writeFileSync(`${manifest}.new`, JSON.stringify(older));
    renameSync(`${manifest}.new`, manifest);
    await d.restart();
    expect((await minimal()).outdated, 'built anew in the background').to.equal(true);

    // The VM on the old build starts again (during the build or after it: a start does not wait for
    // it) and boots the old build's kernel on its disk.
    expect((await d.call('POST', '/vms/old/shutdown')).status).to.equal(200);
    const st = await d.call('POST', '/vms/old/start');
    expect(st.status, st.text).to.equal(200);
    expect(kernelOf('old')).to.equal(join(images, 'minimal', 'vmlinux'));
    expect(await backingName(join(d.config.data_dir, 'vms', 'old', 'disk.qcow2'))).to.equal(
      join(images, 'minimal', 'disk.qcow2'),
    );
    const r = await d.call('POST', '/vms/old/exec?cmd=hostname');
    expect(r.json?.stdout, r.text).to.equal('old\n');

    await waitUntil(
      'the new build of minimal',
      async () => {
        const m = await minimal();
        if (m.outdated || m.older_builds !== 1) throw new Error(JSON.stringify(m));
        return true;
      },
      { ms: 600_000, every: 1000 },
    );
    expect((await minimal()).in_use_by).to.deep.equal(['old']);
  });

  it('gives a new VM the new build, and removes the old build once no VM stands on it, the new VM running on', async () => {
    const made = await d.call('POST', '/vms', { name: 'new', persistent: true });
    expect(made.status, made.text).to.equal(201);
    const kernel = kernelOf('new');
    expect(kernel).to.match(/\/minimal\/build-[0-9a-z]+-vmlinux$/);
    expect(await backingName(join(d.config.data_dir, 'vms', 'new', 'disk.qcow2'))).to.match(
      /\/minimal\/build-[0-9a-z]+-disk\.qcow2$/,
    );
    expect((await d.call('POST', '/vms/new/exec?cmd=hostname')).json?.stdout).to.equal('new\n');

    expect((await d.call('DELETE', '/vms/old')).status).to.equal(200);
    await waitUntil(
      'the old build removed',
      async () => {
        if ((await minimal()).older_builds !== undefined) throw new Error('still kept');
        return true;
      },
      { ms: 30_000, every: 200 },
    );
    for (const f of ['vmlinux', 'initrd.img', 'disk.qcow2', 'older-builds'])
      expect(existsSync(join(images, 'minimal', f)), f).to.equal(false);
    expect(existsSync(kernel!)).to.equal(true);
    expect((await d.call('POST', '/vms/new/exec?cmd=true')).status).to.equal(200);
  });
});
