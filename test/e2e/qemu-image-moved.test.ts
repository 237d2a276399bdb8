import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { SilentLogger } from '../fakes/fakes.js';
import { guestSh, startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { ndjson } from '../helpers/http.js';
import { waitUntil } from '../helpers/wait.js';
import { ensureImage } from './image.js';

/**
 * The images folder moved (docs/image.md, "Moving the images folder"): a persistent VM made on
 * it starts on the same image file at its new path, and not on another build that has the name;
 * the image's snapshot (docs/snapshot-creates.md) stands on the moved file too, and creates go on
 * restoring it.
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
      {
        hypervisor: 'qemu',
        images_dir: folder('a'),
        image: 'minimal',
        memory_mb: 256,
        sandbox_metrics_enabled: false,
        create_from_snapshot: true,
      },
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

  const snapshots = async () =>
    ((await d.call('GET', '/images/minimal')).json as { snapshots: { created_at: string }[] }).snapshots;

  it('starts a persistent VM on its image at the new path, its disk as it was', async () => {
    const r = await d.call('POST', '/vms', { name: 'kept', persistent: true });
    expect(r.status, r.text).to.equal(201);
    await guestSh(d, 'kept', 'echo kept > /root/kept; sync');
    expect((await d.call('POST', '/vms/kept/shutdown')).status).to.equal(200);
    // The first create's shape, captured in the background after it.
    await waitUntil('the image snapshot', async () => (await snapshots()).length === 1, { ms: 120_000, every: 500 });
    await moveTo(folder('b'));
    const started = await d.call('POST', '/vms/kept/start');
    expect(started.status, started.text).to.equal(200);
    expect((await guestSh(d, 'kept', 'cat /root/kept')).stdout).to.equal('kept\n');
  });

  it("keeps the image's snapshot, on the moved file: a create restores it", async () => {
    const [snap] = await snapshots();
    const r = await d.call('POST', '/vms?stream=1', { name: 'eph' });
    expect(r.status, r.text).to.equal(200);
    const phases = ndjson(r.text).map((l) => l.phase);
    expect(phases, r.text).to.include('restore');
    expect(phases.at(-1), r.text).to.equal('ready');
    expect((await guestSh(d, 'eph', 'hostname')).stdout).to.equal('eph\n');
    expect(await snapshots()).to.deep.equal([snap]);
    expect((await d.call('DELETE', '/vms/eph')).status).to.equal(200);
  });

  it('refuses to start it on another build of the image that has the name, with 400 (invalid_state) saying why', async () => {
    expect((await d.call('POST', '/vms/kept/shutdown')).status).to.equal(200);
    // No capture again of the image snapshot, which another build cannot carry: not this test's.
    d.config.create_from_snapshot = false;
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
