import { expect } from 'chai';
import { guestSh, startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { ensureImage } from './image.js';

const sh = (d: TestDaemon, vm: string, script: string) => guestSh(d, vm, script);

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
        // Both images in one folder: the server of the first test is minimal on both runs.
        images_dir: (ensureImage('minimal'), ensureImage(image)),
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
      // The server is a minimal guest on both runs (one debian boot fewer): debian's part is b's
      // address and its reach, and its clone in the next test.
      const [a, b] = await Promise.all([
        d.call('POST', '/vms', { name: 'a', image: 'minimal', memory_mb: 384 }),
        // b is the next test's template: persistent, so it can be suspended.
        d.call('POST', '/vms', { name: 'b', memory_mb, persistent: true }),
      ]);
      expect(a.status, a.text).to.equal(201);
      expect(b.status, b.text).to.equal(201);
      expect(a.json.ip).to.match(/^10\.77\.0\.\d+$/);
      expect(b.json.ip).to.match(/^10\.77\.0\.\d+$/);
      expect(a.json.ip).to.not.equal(b.json.ip);
      expect((await sh(d, 'a', 'ip -4 addr show eth1')).stdout).to.contain(a.json.ip);
      await sh(d, 'a', `mkdir -p /srv && echo hello-over-overlay > /srv/index.html && ${WEB.minimal.serve}`);
      const got = await sh(d, 'b', `${WEB[image].fetch} http://${a.json.ip}:8088/index.html`);
      expect(
        got.stdout,
        `${got.stderr}\na: ${(await sh(d, 'a', 'ip addr; ip neigh')).stdout}\nb: ${(await sh(d, 'b', 'ip addr show eth1; ip neigh; ip route')).stdout}`,
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
