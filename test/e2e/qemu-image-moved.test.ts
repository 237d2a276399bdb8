import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { SilentLogger } from '../fakes/fakes.js';
import { guestSh, startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { ensureImage } from './image.js';

/**
 * The images folder moved (docs/image.md, "Moving the images folder"): a persistent VM made on
 * it starts on the same image file at its new path, and not on another build that has the name.
 */
describe('svcd with QEMU: a VM made before its images folder moved', function () {
  this.timeout(600_000);
  let d: TestDaemon;
  const root = tempDir('svc-moved-images-');
  chmodSync(root, 0o755); // QEMU runs as nobody (qemu.user) and reads the image through it
  const folder = (name: string) => join(root, name);

  before(async () => {
    mkdirSync(folder('a'));
    // A copy (new times, as `cp -r` gives), not the shared build: this one is moved about.
    execFileSync('cp', ['-r', `${join(ensureImage(), 'minimal')}/.`, join(folder('a'), 'minimal')]);
    d = await startTestDaemon(
      { hypervisor: 'qemu', images_dir: folder('a'), image: 'minimal', memory_mb: 256, sandbox_metrics_enabled: false },
      { logger: new SilentLogger() },
    );
  });
  after(async () => {
    await d.call('DELETE', '/vms/kept');
    await d.stop();
    rmSync(root, { recursive: true, force: true });
  });

  /** The daemon started again on `images_dir` `to`, the folder it used moved there first. */
  const moveTo = async (to: string) => {
    renameSync(d.config.images_dir, to);
    d.config.images_dir = to;
    await d.restart();
  };

  it('starts a persistent VM on its image at the new path, its disk as it was', async () => {
    const r = await d.call('POST', '/vms', { name: 'kept', persistent: true });
    expect(r.status, r.text).to.equal(201);
    await guestSh(d, 'kept', 'echo kept > /root/kept; sync');
    expect((await d.call('POST', '/vms/kept/shutdown')).status).to.equal(200);
    await moveTo(folder('b'));
    const started = await d.call('POST', '/vms/kept/start');
    expect(started.status, started.text).to.equal(200);
    expect((await guestSh(d, 'kept', 'cat /root/kept')).stdout).to.equal('kept\n');
  });

  it('refuses to start it on another build of the image that has the name, with 400 (invalid_state) saying why', async () => {
    expect((await d.call('POST', '/vms/kept/shutdown')).status).to.equal(200);
    await moveTo(folder('c'));
    // Another disk under the name the VM's stands on (the manifest and kernel stay).
    const disk = join(folder('c'), 'minimal', 'disk.qcow2');
    rmSync(disk);
    execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', disk, '1G']);
    const refused = await d.call('POST', '/vms/kept/start');
    expect(refused.status, refused.text).to.equal(400);
    expect(refused.json.code).to.equal('invalid_state');
    expect(refused.json.error).to.equal(
      `vm kept cannot start: its disk stands on ${join(folder('b'), 'minimal', 'disk.qcow2')}, which is gone, and ${disk} is another build of the image, not the one it was; put the images folder back where it was (or images_dir back to it)`,
    );
    expect((await d.call('GET', '/vms/kept')).json.status).to.equal('stopped');
  });
});
