import { expect } from 'chai';
import { chmodSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { ensureImage } from './image.js';

/**
 * Boots that cannot succeed fail fast and say why: too little memory is refused at once, and a
 * kernel that panics (a test image whose command line names a root that is not there) ends the
 * create within seconds with the console's last lines, not at the agent's timeout.
 */
describe('svcd with QEMU: a boot that fails says why, fast', function () {
  this.timeout(180_000);
  let d: TestDaemon;

  before(async () => {
    const built = join(ensureImage(), 'minimal');
    const images = tempDir('svc-e2e-panics-');
    chmodSync(images, 0o755);
    symlinkSync(built, join(images, 'minimal'));
    // The minimal image with a command line that leaves the kernel nothing to run: it panics.
    const panics = join(images, 'panics');
    mkdirSync(panics);
    chmodSync(panics, 0o755);
    for (const f of ['vmlinux', 'initrd.img', 'disk.qcow2']) symlinkSync(join(built, f), join(panics, f));
    const m = JSON.parse(readFileSync(join(built, 'manifest.json'), 'utf8')) as Record<string, unknown>;
    m.cmdline = 'console=ttyS0 rdinit=/nonexistent root=/dev/nonexistent rw quiet loglevel=3 panic=-1';
    m.description = 'a kernel that panics (test)';
    writeFileSync(join(panics, 'manifest.json'), JSON.stringify(m));
    d = await startTestDaemon({ hypervisor: 'qemu', images_dir: images, image: 'minimal', ready_timeout: '150s' });
  });
  after(async () => {
    for (const n of ['tinymem', 'panics']) await d.call('DELETE', `/vms/${n}`).catch(() => undefined);
    await d.stop();
  });

  it('refuses at once a VM with less memory than its image boots in', async () => {
    const t0 = Date.now();
    const r = await d.call('POST', '/vms', { name: 'tinymem', memory_mb: 64 });
    expect(r.status, r.text).to.equal(400);
    expect(r.json.error).to.equal('memory_mb 64 is too little for image minimal: it boots in at least 128 MB');
    expect(Date.now() - t0).to.be.below(2000);
    expect((await d.call('GET', '/vms/tinymem')).status).to.equal(404);
  });

  it("fails a kernel panic within seconds with the console's last lines, and keeps the log", async () => {
    const t0 = Date.now();
    const r = await d.call('POST', '/vms?stream=1', { name: 'panics', image: 'panics', memory_mb: 256 });
    const took = Date.now() - t0;
    const last = r.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { phase: string; error?: string })
      .at(-1)!;
    expect(last.phase, r.text).to.equal('error');
    expect(took, 'long before the 150 s agent timeout').to.be.below(60_000);
    expect(last.error).to.match(/stopped while waiting for the guest agent/);
    expect(last.error).to.match(/the console's last lines:\n(  \| .*\n)*  \| .*Kernel panic/);
    expect(last.error).to.contain(`(the console log is kept in ${d.config.data_dir}/logs)`);
    expect((await d.call('GET', '/vms/panics')).status, 'nothing left but the logs').to.equal(404);
  });
});
