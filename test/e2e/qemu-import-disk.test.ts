import { expect } from 'chai';
import { createHash } from 'node:crypto';
import { createReadStream, statSync } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname } from 'node:path';
import { guestSh, startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { ndjson } from '../helpers/http.js';
import { ensureFixture, ensureImage } from './image.js';
import { waitUntil } from '../helpers/wait.js';

/**
 * A cloud disk people bring (issue 15): built in the test from Debian packages (syslinux, the
 * distribution kernel, cloud-init, openssh-server, no agent), imported with POST /images, booted
 * through the firmware with the NoCloud seed, waited for over SSH until cloud-init ran the user-data,
 * and given the agent with agent/deploy, which survives a reboot.
 */
describe('svcd with QEMU: an imported cloud disk (SSH, cloud-init user-data, agent deploy)', function () {
  this.timeout(1_500_000);
  let d: TestDaemon;
  let disk: string;
  const sh = (vm: string, script: string) => guestSh(d, vm, script, { shell: '/bin/sh' });
  const agentUp = (vm: string, ms: number) =>
    waitUntil(
      `the agent of ${vm} answers`,
      async () => {
        const r = await d.call('GET', `/vms/${vm}/agent/health`);
        if (r.status !== 200) throw new Error(`${r.status} ${r.text}`);
        return true;
      },
      { ms, every: 1000 },
    );

  before(async () => {
    disk = ensureFixture('make-cloud-disk.sh', 'qcow2');
    d = await startTestDaemon({
      hypervisor: 'qemu',
      images_dir: ensureImage('minimal'),
      import_dirs: [dirname(disk)],
      sandbox_metrics_enabled: false,
      ready_timeout: '600s',
      memory_mb: 1024,
    });
  });
  after(async () => {
    await d.call('DELETE', '/vms/cl1');
    await d.call('DELETE', '/images/cloud');
    await d.stop();
  });

  it('imports the disk as an SSH image that boots through the firmware', async () => {
    const r = await d.call('POST', '/images', { name: 'cloud', from: `disk:${disk}` });
    expect(r.status, r.text).to.equal(201);
    expect(r.json).to.include({ id: 'cloud', agent_ready: false, boot: 'firmware', ssh_user: 'root' });
  });

  it('imports the same disk from its URL, the digest checked, as the same image', async () => {
    // streamed from the fixture (hundreds of MiB), as a web server would
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-length': statSync(disk).size });
      createReadStream(disk).pipe(res);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/cloud.qcow2`;
    try {
      const hash = createHash('sha256');
      await pipeline(createReadStream(disk), hash);
      const digest = `sha256:${hash.digest('hex')}`;
      const r = await d.call('POST', '/images?stream=1', { name: 'cloud-url', from: url, digest });
      const events = ndjson(r.text);
      expect(events.at(-1)!.phase, r.text).to.equal('ready');
      expect(events.map((e) => e.message).join('\n')).to.match(/downloaded \d/);
      const got = (await d.call('GET', '/images/cloud-url')).json as Record<string, unknown>;
      const had = (await d.call('GET', '/images/cloud')).json as Record<string, unknown>;
      expect(had.min_disk_gb).to.be.a('number');
      expect(got).to.include({ source: url, boot: 'firmware', agent_ready: false, min_disk_gb: had.min_disk_gb });
      expect(got.description).to.equal(`imported from ${url}`);
    } finally {
      server.close();
      await d.call('DELETE', '/images/cloud-url');
    }
  });

  it('waits for cloud-init to run the user-data (wait=userdata), over SSH', async () => {
    const userdata = '#!/bin/sh\necho "from-userdata $(id -un)" > /var/tmp/userdata-marker\n';
    const r = await d.call('POST', '/vms?wait=userdata&timeout=900s&stream=1', {
      name: 'cl1',
      image: 'cloud',
      persistent: true,
      disk_gb: 4,
      userdata,
    });
    const events = ndjson(r.text);
    expect(events.at(-1)!.phase, r.text).to.equal('ready');
    const phases = events.map((e) => e.phase);
    expect(phases, r.text).to.include.members(['wait_ssh', 'userdata']);
    expect(phases).not.to.include('wait_agent');
  });

  it('answers agent routes with 503 saying to deploy the agent, until agent/deploy installs it', async () => {
    const before = await d.call('POST', '/vms/cl1/exec?cmd=true');
    expect(before.status, before.text).to.equal(503);
    expect((before.json as { error: string }).error).to.match(
      /no svc agent yet: deploy it with POST \/vms\/cl1\/agent\/deploy/,
    );
    const dep = await d.call('POST', '/vms/cl1/agent/deploy');
    expect(dep.status, dep.text).to.equal(200);
    const out = await sh(
      'cl1',
      'cat /var/tmp/userdata-marker; hostname; df -k / | tail -1; systemctl is-enabled svc-agent.service',
    );
    const [marker, host, df, enabled] = out.stdout.trim().split('\n');
    expect(marker, out.stdout + out.stderr).to.equal('from-userdata root');
    expect(host).to.equal('cl1');
    // cloud-init grew the root partition and filesystem to the disk asked for.
    expect(Number(df.split(/\s+/)[1]) * 1024).to.be.greaterThan(3.3 * 2 ** 30);
    expect(enabled).to.equal('enabled');
  });

  it('keeps the deployed agent across a reboot of the guest', async () => {
    expect((await d.call('POST', '/vms/cl1/shutdown')).status).to.equal(200);
    const st = await d.call('POST', '/vms/cl1/start');
    expect(st.status, st.text).to.equal(200);
    await agentUp('cl1', 180_000);
    const out = await sh('cl1', 'cat /var/tmp/userdata-marker');
    expect(out.stdout.trim()).to.equal('from-userdata root');
  });
});
