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

    it('shares a folder both ways, honours read-only, and keeps it across shutdown and start', async () => {
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
      await d.call('POST', '/vms/m/shutdown');
      expect((await d.call('POST', '/vms/m/start')).json.status).to.equal('running');
      expect((await sh(d, 'm', 'cat /mnt/share/from-guest.txt')).stdout).to.equal('written in the guest\n');
    });
  });
}

/** How each image serves a file and fetches one: busybox on minimal, python3 and curl on debian. */
const WEB = {
  minimal: { serve: 'busybox httpd -p 8088 -h /srv', fetch: 'wget -q -O -' },
  debian: {
    serve: '(cd /srv && setsid python3 -m http.server 8088 >/var/tmp/http.log 2>&1 &)',
    fetch: 'curl -sS --retry 20 --retry-delay 1 --retry-all-errors',
  },
} as const;

for (const [n, image] of (['minimal', 'debian'] as const).entries())
  describe(`svcd with QEMU: the overlay network (${image})`, function () {
    this.timeout(image === 'debian' ? 480_000 : 240_000);
    let d: TestDaemon;
    before(async () => {
      d = await startTestDaemon({
        hypervisor: 'qemu',
        images_dir: ensureImage(image),
        image,
        network: 'overlay',
        overlay_mcast: `230.0.74.${1 + ((process.pid + n) % 200)}:${47000 + ((process.pid + n) % 1000)}`,
        sandbox_metrics_enabled: false,
        ready_timeout: '240s',
      });
    });
    after(async () => {
      for (const n of ['a', 'b', 'c']) await d.call('DELETE', `/vms/${n}`);
      await d.stop();
    });

    it('gives each VM its own address, and one VM reaches a server on the other', async () => {
      const memory_mb = image === 'debian' ? 512 : 384;
      const [a, b] = await Promise.all([
        d.call('POST', '/vms', { name: 'a', memory_mb }),
        // b is the next test's template: persistent, so it can be suspended.
        d.call('POST', '/vms', { name: 'b', memory_mb, persistent: true }),
      ]);
      expect(a.status, a.text).to.equal(201);
      expect(b.status, b.text).to.equal(201);
      expect(a.json.ip).to.match(/^10\.77\.0\.\d+$/);
      expect(b.json.ip).to.match(/^10\.77\.0\.\d+$/);
      expect(a.json.ip).to.not.equal(b.json.ip);
      expect((await sh(d, 'a', 'ip -4 addr show eth1')).stdout).to.contain(a.json.ip);
      await sh(d, 'a', `mkdir -p /srv && echo hello-over-overlay > /srv/index.html && ${WEB[image].serve}`);
      const got = await sh(d, 'b', `${WEB[image].fetch} http://${a.json.ip}:8088/index.html`);
      expect(
        got.stdout,
        `${got.stderr}\na: ${(await sh(d, 'a', 'ss -ltn; ip addr; ip neigh; cat /var/tmp/http.log')).stdout}\nb: ${(await sh(d, 'b', 'ip addr show eth1; ip neigh; ip route')).stdout}`,
      ).to.equal('hello-over-overlay\n');
    });

    it("gives a clone of a suspended template its own address in place of the template's, and it reaches the others", async () => {
      // The template is the VM that fetched from a in the test before, suspended with its address.
      const t = await d.call('GET', '/vms/b');
      expect(t.json.ip).to.match(/^10\.77\.0\.\d+$/);
      expect((await d.call('POST', '/vms/b/suspend')).status).to.equal(200);
      const c = await d.call('POST', '/vms', { name: 'c', from: 'b' });
      expect(c.status, c.text).to.equal(201);
      expect(c.json.ip).to.match(/^10\.77\.0\.\d+$/);
      expect(c.json.ip).to.not.equal(t.json.ip);
      const eth1 = (await sh(d, 'c', 'ip -4 addr show eth1')).stdout;
      expect(eth1).to.contain(`${c.json.ip}/`);
      expect(eth1).to.not.contain(`${t.json.ip}/`);
      const a = await d.call('GET', '/vms/a');
      const got = await sh(d, 'c', `${WEB[image].fetch} http://${a.json.ip}:8088/index.html`);
      expect(got.stdout, got.stderr).to.equal('hello-over-overlay\n');
    });
  });
