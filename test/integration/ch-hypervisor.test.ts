import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { HttpGuestAgent } from '../../src/adapters/guest-link/http-guest-agent.js';
import { hybridVsockConnector } from '../../src/adapters/guest-link/transport.js';
import { ChHypervisor } from '../../src/adapters/hypervisor/cloud-hypervisor/ch-hypervisor.js';
import { chLayout } from '../../src/adapters/hypervisor/cloud-hypervisor/ch-vm-config.js';
import { ImageCatalog } from '../../src/adapters/images/image-catalog.js';
import { InvalidStateError } from '../../src/domain/errors.js';
import type { VmHandle, VmSpec } from '../../src/ports/hypervisor.js';
import { hypervisorContract } from '../contract/hypervisor-contract.js';
import { SilentLogger } from '../fakes/fakes.js';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { installFakeCh, type FakeCh } from '../helpers/fake-cloud-hypervisor.js';
import { waitUntil } from '../helpers/wait.js';

const agent = new HttpGuestAgent(hybridVsockConnector);
const at = (h: VmHandle) => ({ host: '', port: h.agent_port, socket: h.agent_socket });
const make = (ch: FakeCh) =>
  new ChHypervisor({ binary: ch.binary, images: new ImageCatalog(ch.images), log: new SilentLogger() });

let fake: FakeCh;
let contractHv: ChHypervisor;
hypervisorContract(
  'ChHypervisor (a stand-in cloud-hypervisor)',
  async () => {
    fake = installFakeCh(tempDir('svc-ch-contract-'));
    contractHv = make(fake);
    return {
      hv: contractHv,
      image: 'tiny',
      bootMs: 10_000,
      features: { forwards: false, mounts: false, fork: false },
      waitUp: (_name, h, ms) =>
        waitUntil('the stand-in guest answers', async () => (await agent.health(at(h), 500), true), { ms, every: 50 }),
      answers: (_name, h) =>
        agent.health(at(h), 800).then(
          () => true,
          () => false,
        ),
      crash: async (_name, h) => void process.kill(h.pid!, 'SIGKILL'),
      live: () => Object.keys(contractHv.pids()),
      restart: async () => {
        await contractHv.release();
        contractHv = make(fake);
        return contractHv;
      },
    };
  },
  async () => agent.close(),
);

describe('ChHypervisor: what it asks of cloud-hypervisor', function () {
  this.timeout(20_000);
  let ch: FakeCh;
  let hv: ChHypervisor;
  let spec: VmSpec;
  beforeEach(async () => {
    const root = tempDir('svc-ch-');
    ch = installFakeCh(root);
    hv = make(ch);
    spec = {
      name: 'a',
      dir: join(root, 'vms', 'a'),
      cpus: 2,
      memory_mb: 512,
      disk_gb: 2,
      image: 'tiny',
      hostname: 'a',
      forwards: [],
      mounts: [],
    };
    mkdirSync(spec.dir, { recursive: true });
    await hv.provision(spec);
  });
  afterEach(async () => {
    await hv.destroy(spec);
  });

  it('boots the image kernel with the overlay, the seed and a hybrid vsock device through vm.create and vm.boot', async () => {
    const h = await hv.launch(spec);
    const l = chLayout(spec.dir);
    expect(ch.calls()).to.deep.equal([['--api-socket', `path=${l.api}`]]);
    const api = ch.api().map(([, m, a]) => `${m} ${a}`);
    expect(api.slice(-2)).to.deep.equal(['PUT vm.create', 'PUT vm.boot']);
    const created = ch.api().find(([, , a]) => a === 'vm.create')![3]!;
    expect(created.cpus).to.deep.equal({ boot_vcpus: 2, max_vcpus: 2 });
    expect(created.memory).to.deep.equal({ size: 512 * 1024 * 1024 });
    expect(created.payload).to.deep.include({
      kernel: join(ch.images, 'tiny', 'vmlinux'),
      initramfs: join(ch.images, 'tiny', 'initrd.img'),
    });
    expect(created.disks).to.deep.equal([
      { path: l.disk, image_type: 'Qcow2' },
      { path: l.seed, readonly: true, image_type: 'Raw' },
    ]);
    expect(created.vsock).to.deep.equal({ cid: 3, socket: l.vsock });
    expect(created).not.to.have.property('net');
    // The overlay sits on the image's disk, at the size asked for.
    const info = JSON.parse(execFileSync('qemu-img', ['info', '--output=json', l.disk], { encoding: 'utf8' })) as {
      'backing-filename': string;
      'virtual-size': number;
    };
    expect(info['backing-filename']).to.equal(join(ch.images, 'tiny', 'disk.qcow2'));
    expect(info['virtual-size']).to.equal(2 * 1024 ** 3);
    expect(h).to.deep.include({ agent_port: 7475, agent_cid: 3, agent_socket: l.vsock, ssh_port: 0, forwards: [] });
    expect(Number(readFileSync(l.pidfile, 'utf8'))).to.equal(h.pid);
    expect((await agent.health(at(h), 2000)).hostname).to.equal('stand-in');
  });

  it('suspends as pause, snapshot into a temporary folder, shutdown; restores with --restore and vm.resume, then drops the snapshot', async () => {
    await hv.launch(spec);
    const l = chLayout(spec.dir);
    expect(await hv.suspend(spec)).to.deep.equal({ snapshot: true });
    const snap = ch.api().find(([, , a]) => a === 'vm.snapshot')![3]!;
    expect(snap).to.deep.equal({ destination_url: `file://${l.snapshot}.tmp` });
    expect(
      ch
        .api()
        .map(([, m, a]) => `${m} ${a}`)
        .slice(-3),
    ).to.deep.equal(['PUT vm.pause', 'PUT vm.snapshot', 'PUT vmm.shutdown']);
    expect(existsSync(join(l.snapshot, 'config.json'))).to.equal(true);
    expect(existsSync(`${l.snapshot}.tmp`)).to.equal(false);
    expect(await hv.hasSavedState(spec)).to.equal(true);
    const r = await hv.launch(spec, { restore: true });
    expect(r.restored_from_snapshot).to.equal(true);
    expect(ch.calls().at(-1)).to.deep.equal([
      '--api-socket',
      `path=${l.api}`,
      '--restore',
      `source_url=file://${l.snapshot}`,
    ]);
    expect(ch.api().at(-1)!.slice(1, 3)).to.deep.equal(['PUT', 'vm.resume']);
    expect(existsSync(l.snapshot)).to.equal(false);
    expect((await agent.health(at(r), 2000)).hostname).to.equal('stand-in');
  });

  it('a clone restores from the template snapshot with every path moved to its own folder', async () => {
    await hv.launch(spec);
    await hv.suspend(spec);
    const cs: VmSpec = { ...spec, name: 'b', dir: join(spec.dir, '..', 'b'), hostname: 'b' };
    mkdirSync(cs.dir, { recursive: true });
    try {
      expect(await hv.clone(spec, cs)).to.deep.equal({ snapshot: true });
      const config = readFileSync(join(chLayout(cs.dir).snapshot, 'config.json'), 'utf8');
      expect(config).not.to.include(`${spec.dir}/`);
      expect(JSON.parse(config).vsock.socket).to.equal(chLayout(cs.dir).vsock);
      const h = await hv.launch(cs, { restore: true });
      expect(h.agent_socket).to.equal(chLayout(cs.dir).vsock);
      expect((await agent.health(at(h), 2000)).hostname).to.equal('stand-in');
      // The template's own snapshot is untouched: it can restore too.
      const t = await hv.launch(spec, { restore: true });
      expect(t.restored_from_snapshot).to.equal(true);
    } finally {
      await hv.destroy(cs);
    }
  });

  it('names the missing binary and the key that sets it', async () => {
    const none = new ChHypervisor({
      binary: join(ch.images, 'no-such-binary'),
      images: new ImageCatalog(ch.images),
      log: new SilentLogger(),
    });
    const e = (await none.launch(spec).catch((x: Error) => x)) as Error;
    expect(e).to.be.instanceOf(InvalidStateError);
    expect(e.message).to.match(/no-such-binary" not found \(cloud_hypervisor.binary/);
    expect(none.pids()).to.deep.equal({});
  });

  it('a failed boot kills the VMM and leaves no process behind', async () => {
    ch.failBoot();
    const e = (await hv.launch(spec).catch((x: Error) => x)) as Error;
    expect(e).to.be.instanceOf(Error);
    expect(e.message).to.match(/told to fail/);
    expect(hv.pids()).to.deep.equal({});
    const pid = Number(readFileSync(chLayout(spec.dir).pidfile, 'utf8'));
    expect(() => process.kill(pid, 0)).to.throw();
  });
});

describe('svcd with hypervisor: cloud-hypervisor (a stand-in binary)', function () {
  this.timeout(30_000);
  let d: TestDaemon;
  let ch: FakeCh;
  const alive = (pid: number) => {
    try {
      return process.kill(pid, 0);
    } catch {
      return false;
    }
  };
  before(async () => {
    const root = tempDir('svc-ch-daemon-');
    ch = installFakeCh(root);
    d = await startTestDaemon(
      { hypervisor: 'cloud-hypervisor', cloud_hypervisor: { binary: ch.binary }, images_dir: ch.images },
      {},
      root,
    );
  });
  after(() => d.stop());

  it('creates, proxies to the agent over hybrid vsock, suspends, restores and deletes a VM', async () => {
    const made = await d.call('POST', '/vms?wait=agent', {
      name: 'chv',
      persistent: true,
      image: 'tiny',
      cpus: 1,
      memory_mb: 256,
      disk_gb: 1,
    });
    expect(made.status, made.text).to.equal(201);
    expect(made.json.status).to.equal('running');
    const health = await d.call('GET', '/vms/chv/agent/health');
    expect(health.status, health.text).to.equal(200);
    expect(health.json.hostname).to.equal('stand-in');
    const fwd = await d.call('POST', '/vms/chv/forwards', { guest_port: 8080 });
    expect(fwd.status, fwd.text).to.equal(501);
    expect(fwd.json.error).to.match(/no network device/);
    const sus = await d.call('POST', '/vms/chv/suspend');
    expect(sus.status, sus.text).to.equal(200);
    const back = await d.call('POST', '/vms/chv/restore');
    expect(back.status, back.text).to.equal(200);
    expect((await d.call('GET', '/vms/chv/agent/health')).status).to.equal(200);
    // restored paused: cloud-hypervisor's restored VM is not resumed until the VM's resume
    expect((await d.call('POST', '/vms/chv/suspend')).status).to.equal(200);
    const bad = await d.call('POST', '/vms/chv/restore?paused=yes');
    expect([bad.status, bad.json.error]).to.deep.equal([400, 'paused must be true or false']);
    const held = await d.call('POST', '/vms/chv/restore?paused=true');
    expect(held.status, held.text).to.equal(200);
    expect(held.json.status).to.equal('paused');
    const resumes = () => ch.api().filter(([, , action]) => action === 'vm.resume').length;
    const before = resumes();
    expect((await d.call('POST', '/vms/chv/resume')).status).to.equal(200);
    expect(resumes()).to.equal(before + 1);
    expect((await d.call('GET', '/vms/chv/agent/health')).status).to.equal(200);
    expect((await d.call('DELETE', '/vms/chv')).status).to.equal(200);
    expect((await d.call('GET', '/vms/chv')).status).to.equal(404);
    expect(ch.api().filter(([pid]) => alive(pid))).to.deep.equal([]);
  });
});
