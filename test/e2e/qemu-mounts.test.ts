import { expect } from 'chai';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { guestSh, startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { ndjson } from '../helpers/http.js';
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
      // A suspend with 9p: the guest lets go of its shares, QEMU unplugs them, the guest is saved
      // and its processes run on after the restore, the shares given back; virtio-fs: not saved.
      const pid = (await sh(d, 'm', 'sleep 100000 </dev/null >/dev/null 2>&1 & echo $!')).stdout.trim();
      const s = await d.call('POST', '/vms/m/suspend');
      expect(s.json.message).to.equal(
        driver === '9p' ? 'vm m suspended' : 'vm m suspended (no snapshot: restore will cold-boot)',
      );
      const back = await d.call('POST', '/vms/m/restore');
      if (driver === '9p') expect(back.json.warning).to.equal(undefined);
      else expect(back.json.warning).to.match(/^cold-booted/);
      expect((await sh(d, 'm', `kill -0 ${pid} 2>/dev/null && echo alive`)).stdout).to.equal(
        driver === '9p' ? 'alive\n' : '',
      );
      expect((await sh(d, 'm', 'cat /mnt/share/from-guest.txt')).stdout).to.equal('written in the guest\n');
      expect((await sh(d, 'm', 'echo x > /mnt/ro/nope.txt')).exit_code).to.not.equal(0);
    });

    // A clone wakes from its template's saved state, which has no share: 9p's are added to it as it
    // wakes and mounted then; virtio-fs's only at boot, so such a clone is refused. Suspended, it
    // lets go of them and is saved, unless a process works in one.
    if (image === 'minimal')
      it(`gives a clone of a suspended template its own folders${driver === '9p' ? ", its template's process running on" : ' (refused with virtio-fs)'}`, async () => {
        const t = await d.call('POST', '/vms', { name: 'tpl', persistent: true, memory_mb: 384 });
        expect(t.status, t.text).to.equal(201);
        await sh(d, 'tpl', 'sleep 100000 </dev/null >/dev/null 2>&1 & echo $! > /tmp/kept.pid');
        const pid = (await sh(d, 'tpl', 'cat /tmp/kept.pid')).stdout.trim();
        expect((await d.call('POST', '/vms/tpl/suspend')).json.message).to.equal('vm tpl suspended');
        writeFileSync(join(host, 'for-clone.txt'), 'to the clone');
        const c = await d.call('POST', '/vms?stream=1', {
          name: 'c',
          from: 'tpl',
          persistent: true,
          mounts: [
            { host, guest: '/mnt/share', tag: 'share' },
            { host: ro, guest: '/mnt/ro', readonly: true },
          ],
        });
        if (driver === 'virtiofs') {
          expect(c.status, c.text).to.equal(501);
          expect(c.text).to.match(/attaches host folders only when a guest boots/);
          expect((await d.call('GET', '/vms/c')).status).to.equal(404);
          await d.call('DELETE', '/vms/tpl');
          return;
        }
        expect(c.status, c.text).to.equal(200);
        const events = ndjson(c.text);
        expect(events.at(-1)!.phase, c.text).to.equal('ready');
        expect(events.find((e) => e.phase === 'boot')!.message).to.match(/restoring from the snapshot of template tpl/);
        // The template's process came along: the clone woke, it did not boot.
        expect((await sh(d, 'c', `kill -0 ${pid} && echo alive`)).stdout).to.equal('alive\n');
        expect((await sh(d, 'c', 'cat /mnt/share/for-clone.txt')).stdout).to.equal('to the clone');
        await sh(d, 'c', 'echo from the clone > /mnt/share/clone-wrote.txt; sync');
        expect(readFileSync(join(host, 'clone-wrote.txt'), 'utf8')).to.equal('from the clone\n');
        expect((await sh(d, 'c', 'echo x > /mnt/ro/nope.txt')).exit_code).to.not.equal(0);
        // Its shares were plugged in as it woke: they are let go of and unplugged by id the same way.
        expect((await d.call('POST', '/vms/c/suspend')).json.message).to.equal('vm c suspended');
        expect((await d.call('POST', '/vms/c/restore')).json.warning).to.equal(undefined);
        expect((await sh(d, 'c', `kill -0 ${pid} && echo alive`)).stdout).to.equal('alive\n');
        expect((await sh(d, 'c', 'cat /mnt/share/clone-wrote.txt')).stdout).to.equal('from the clone\n');
        // A process working in a share keeps it: the guest is not saved, and comes back booted with it.
        await sh(d, 'c', 'cd /mnt/share && sleep 100000 </dev/null >/dev/null 2>&1 &');
        const busy = await d.call('POST', '/vms/c/suspend');
        expect(busy.json.message, busy.text).to.equal('vm c suspended (no snapshot: restore will cold-boot)');
        expect((await d.call('POST', '/vms/c/restore')).json.warning).to.match(/^cold-booted/);
        expect((await sh(d, 'c', 'cat /mnt/share/clone-wrote.txt')).stdout).to.equal('from the clone\n');
        await d.call('DELETE', '/vms/c');
        await d.call('DELETE', '/vms/tpl');
      });
  });
}
