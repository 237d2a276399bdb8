import { expect } from 'chai';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { guestSh, startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { ensureImage } from './image.js';

const sh = (d: TestDaemon, vm: string, script: string) => guestSh(d, vm, script);

/** 9p and virtio-fs on the fast image; 9p on debian too, whose systemd boot mounts them its own way. */
const MOUNT_CASES = [
  ['minimal', '9p'],
  ['minimal', 'virtiofs'],
  ['debian', '9p'],
] as const;

for (const [image, driver] of MOUNT_CASES) {
  describe(`svcd with QEMU: host folders in guests (${image}, ${driver})`, function () {
    this.timeout(image === 'debian' ? 480_000 : 240_000);
    let d: TestDaemon;
    const host = tempDir('svc-share-');
    const ro = tempDir('svc-share-ro-');
    before(async () => {
      d = await startTestDaemon({
        hypervisor: 'qemu',
        images_dir: ensureImage(image),
        image,
        mount_driver: driver,
        mount_dirs: [host, ro],
        sandbox_metrics_enabled: false,
        ready_timeout: '240s',
      });
    });
    after(async () => {
      await d.call('DELETE', '/vms/m');
      await d.stop();
    });

    it('refuses bad mount input with 400 before anything exists', async () => {
      for (const mounts of [
        [{ host: join(host, 'missing'), guest: '/mnt/x' }],
        [{ host: '/', guest: '/mnt/x' }],
        [{ host: tmpdir(), guest: '/mnt/x' }],
        [{ host, guest: "/mnt/x'y" }],
        [{ host, guest: 'relative' }],
        [{ host: `${host},readonly=off`, guest: '/x' }],
        [{ host, guest: '/x', tag: 'a,b' }],
      ]) {
        const r = await d.call('POST', '/vms', { name: 'bad', mounts });
        expect(r.status, JSON.stringify(mounts)).to.equal(400);
      }
      expect((await d.call('GET', '/vms')).json).to.deep.equal([]);
    });

    // Across a shutdown and start the host gives the same folders again (the record's); the guest
    // mounts them as at its first boot. The minimal runs check that; debian's boots are the dearest.
    const again = image === 'minimal';
    it(`shares a folder both ways, honours read-only${again ? ', and keeps it across shutdown and start' : ''}`, async () => {
      writeFileSync(join(host, 'from-host.txt'), 'written on the host');
      writeFileSync(join(ro, 'ro.txt'), 'read only');
      const r = await d.call('POST', '/vms', {
        name: 'm',
        persistent: true,
        memory_mb: image === 'debian' ? 512 : 384,
        mounts: [
          { host, guest: '/mnt/share', tag: 'share' },
          { host: ro, guest: '/mnt/ro', readonly: true },
        ],
      });
      expect(r.status, r.text).to.equal(201);
      expect(r.json.mounts).to.have.length(2);
      expect((await sh(d, 'm', 'cat /mnt/share/from-host.txt')).stdout).to.equal('written on the host');
      await sh(d, 'm', 'echo written in the guest > /mnt/share/from-guest.txt; sync');
      expect(readFileSync(join(host, 'from-guest.txt'), 'utf8')).to.equal('written in the guest\n');
      mkdirSync(join(host, 'later'));
      writeFileSync(join(host, 'later', 'live.txt'), 'live');
      expect((await sh(d, 'm', 'cat /mnt/share/later/live.txt')).stdout).to.equal('live');
      expect((await sh(d, 'm', 'cat /mnt/ro/ro.txt')).stdout).to.equal('read only');
      const w = await sh(d, 'm', 'echo x > /mnt/ro/nope.txt');
      expect(w.exit_code).to.not.equal(0);
      expect(w.stderr).to.match(/Read-only/i);
      if (!again) return;
      await d.call('POST', '/vms/m/shutdown');
      expect((await d.call('POST', '/vms/m/start')).json.status).to.equal('running');
      expect((await sh(d, 'm', 'cat /mnt/share/from-guest.txt')).stdout).to.equal('written in the guest\n');
    });
  });
}
