import { expect } from 'chai';
import { existsSync, readFileSync, readdirSync, realpathSync, writeFileSync } from 'node:fs';
import type { ExecRequest, ExecResult } from '../../src/domain/agent.js';
import { join } from 'node:path';
import type { InMemoryGuestAgent } from '../../src/adapters/hypervisor/fake/in-memory-guest-agent.js';
import { FAKE_DISK_FAULT, type InMemoryHypervisor } from '../../src/adapters/hypervisor/fake/in-memory-hypervisor.js';
import { GuestAgent } from '../../src/ports/guest-agent.js';
import { Hypervisor } from '../../src/ports/hypervisor.js';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { ndjson } from '../helpers/http.js';
import { poll } from '../helpers/wait.js';

interface Line {
  phase: string;
  message: string;
}

/** The selection rule of snapshot creates (docs/snapshot-creates.md), on the fake hypervisor. */
describe('creates from image snapshots (fake hypervisor)', function () {
  this.timeout(60000);
  let d: TestDaemon;
  let hv: InMemoryHypervisor;
  let agent: InMemoryGuestAgent;

  const create = async (body: Record<string, unknown>): Promise<Line[]> => {
    const r = await d.call('POST', '/vms?stream=1', body);
    expect(r.status, r.text).to.equal(200);
    const lines = ndjson(r.text) as unknown as Line[];
    expect(lines.at(-1)!.phase, r.text).to.equal('ready');
    return lines;
  };
  const snapshotsOf = async (image: string) =>
    (await d.call('GET', `/images/${image}`)).json.snapshots as Record<string, number>[];
  /** Waits for the background capture the last create started (a loaded CI machine took over 5 s). */
  const captured = async (image: string, n: number) => {
    await poll(async () => (await snapshotsOf(image)).length >= n, { ms: 40_000, every: 25 });
    expect(await snapshotsOf(image)).to.have.length(n);
  };

  before(async () => {
    d = await startTestDaemon({ create_from_snapshot: true, max_vms: 20, mount_dirs: [d0()] });
    hv = d.daemon.container.get<InMemoryHypervisor>(Hypervisor);
    agent = d.daemon.container.get<InMemoryGuestAgent>(GuestAgent);
  });
  after(async () => d.stop());
  let mountDir: string | undefined;
  function d0(): string {
    mountDir ??= tempDir('svc-snapc-');
    return mountDir;
  }

  it('boots the first create of a shape, saying why, then captures that shape in the background', async () => {
    const lines = await create({ name: 'first', image: 'minimal', memory_mb: 256 });
    expect(lines.find((l) => l.phase === 'boot')!.message).to.equal(
      'booting with 1 cpu(s) and 256 MB (not from a snapshot: no snapshot of image minimal with 1 cpu(s) and 256 MB yet: one is made after this vm boots)',
    );
    expect(lines.some((l) => l.phase === 'restore')).to.equal(false);
    await captured('minimal', 1);
    const [snap] = await snapshotsOf('minimal');
    expect(snap).to.include({ cpus: 1, memory_mb: 256, disk_gb: 4 }); // config disk_gb
    expect(snap.capture_ms).to.be.a('number');
    // The snapshot's own guest was suspended, and is no VM of anyone's.
    const names = ((await d.call('GET', '/vms')).json as { name: string }[]).map((v) => v.name);
    expect(names).to.deep.equal(['first']);
  });

  it('restores the next create of that shape, with its own identity, disk size and userdata', async () => {
    const lines = await create({ name: 'second', image: 'minimal', memory_mb: 256, disk_gb: 6, userdata: 'echo hi' });
    expect(lines.map((l) => l.phase)).to.include('restore');
    expect(lines.some((l) => l.phase === 'boot')).to.equal(false);
    expect(lines.find((l) => l.phase === 'restore')!.message).to.equal(
      'restoring the snapshot of image minimal (1 cpu(s), 256 MB)',
    );
    const [id] = agent.identities.get('second')!;
    expect(id.hostname).to.equal('second');
    expect(id.machine_id).to.match(/^[0-9a-f]{32}$/);
    expect(id.entropy).to.match(/^[0-9a-f]{64}$/);
    expect(id.disk_bytes).to.equal(6 * 2 ** 30);
    expect(id.userdata).to.equal('echo hi');
    const vm = (await d.call('GET', '/vms/second')).json;
    expect(vm).to.include({ image: 'minimal', disk_gb: 6, memory_mb: 256, status: 'running' });
    expect(vm.from).to.equal(undefined);
    // The same disk as the snapshot's: nothing to grow, nothing to run.
    await create({ name: 'third', image: 'minimal', memory_mb: 256 });
    const [id3] = agent.identities.get('third')!;
    expect(id3.disk_bytes).to.equal(undefined);
    expect(id3.userdata).to.equal(undefined);
  });

  it('restores a create with host folders, its guest told to mount them; one that cannot fails the create, leaving nothing', async () => {
    const mounts = [{ host: d0(), guest: '/mnt/x', tag: 'x' }];
    const ran: ExecRequest[] = [];
    let answer: ExecResult = { stdout: '', stderr: '', exit_code: 0 };
    const port: GuestAgent = agent;
    const exec = port.exec;
    port.exec = async (_ep, req) => {
      ran.push(req);
      return answer;
    };
    try {
      const lines = await create({ name: 'mounted', image: 'minimal', memory_mb: 256, mounts });
      expect(lines.map((l) => l.phase)).to.include('restore');
      expect(lines.some((l) => l.phase === 'boot')).to.equal(false);
      expect(ran.map((r) => [r.cmd, ...r.args])).to.deep.equal([['/bin/sh', '-c', hv.mountsAfterRestore(mounts)]]);
      expect((await d.call('GET', '/vms/mounted')).json.mounts).to.deep.equal([
        { ...mounts[0], host: realpathSync(d0()) },
      ]);
      // The share that never showed up in the guest: the create fails with the guest's words.
      answer = { stdout: '', stderr: 'share x did not appear in the guest\n', exit_code: 1 };
      const r = await d.call('POST', '/vms?stream=1', { name: 'unmounted', image: 'minimal', memory_mb: 256, mounts });
      const last = (ndjson(r.text) as unknown as Line[]).at(-1)!;
      expect(last.phase).to.equal('error');
      expect(last.message).to.match(
        /^vm unmounted could not mount its host folders: share x did not appear in the guest/,
      );
      expect((await d.call('GET', '/vms/unmounted')).status).to.equal(404);
      expect(hv.state('unmounted')).to.equal(undefined);
    } finally {
      port.exec = exec;
    }
    await d.call('DELETE', '/vms/mounted');
  });

  it('boots what a restore cannot give, and says why', async () => {
    // A hypervisor that attaches shares only at boot (QEMU with virtio-fs, cloud-hypervisor).
    Object.assign(hv, { mountsAfterRestore: undefined });
    try {
      const mounts = await create({
        name: 'mounted',
        image: 'minimal',
        memory_mb: 256,
        mounts: [{ host: d0(), guest: '/mnt/x' }],
      });
      expect(mounts.find((l) => l.phase === 'boot')!.message).to.match(
        /not from a snapshot: host folders are attached when a guest boots\)$/,
      );
    } finally {
      delete (hv as Partial<InMemoryHypervisor>).mountsAfterRestore;
    }
    const small = await create({ name: 'small', image: 'minimal', memory_mb: 256, disk_gb: 2 });
    expect(small.find((l) => l.phase === 'boot')!.message).to.match(
      /not from a snapshot: its 2 GB disk is smaller than the snapshots' \(4 GB: config disk_gb\)\)$/,
    );
    const noAgent = await create({ name: 'noagent', image: 'ssh-only' });
    expect(noAgent.find((l) => l.phase === 'boot')!.message).to.match(
      /not from a snapshot: image ssh-only has no svc-agent to give a restored copy its identity\)$/,
    );
    // Another shape is its own snapshot.
    const other = await create({ name: 'big', image: 'minimal', memory_mb: 512, cpus: 2 });
    expect(other.find((l) => l.phase === 'boot')!.message).to.match(
      /no snapshot of image minimal with 2 cpu\(s\) and 512 MB yet/,
    );
    await captured('minimal', 2);
    expect((await snapshotsOf('minimal')).map((s) => [s.cpus, s.memory_mb])).to.deep.equal([
      [1, 256],
      [2, 512],
    ]);
  });

  it('never restores a snapshot of an older build of the image: it boots, and the new capture replaces it', async () => {
    const before = (await snapshotsOf('minimal')).find((s) => s.memory_mb === 256)!;
    hv.rebuild('minimal');
    const lines = await create({ name: 'rebuilt', image: 'minimal', memory_mb: 256 });
    expect(lines.find((l) => l.phase === 'boot')!.message).to.match(
      /no snapshot of image minimal with 1 cpu\(s\) and 256 MB yet/,
    );
    await poll(
      async () => {
        const now = (await snapshotsOf('minimal')).find((s) => s.memory_mb === 256);
        return !!now && now.created_at !== before.created_at;
      },
      { ms: 5000, every: 25 },
    );
    const after = (await snapshotsOf('minimal')).filter((s) => s.memory_mb === 256);
    expect(after).to.have.length(1);
    expect(after[0].created_at).to.not.equal(before.created_at);
    // A restarted daemon whose image is the first build again (a fresh fake counts from 1) finds
    // the new 256 MB one stale: it goes, and is captured again in the background; the 512 MB one,
    // made of the first build, is good again.
    await d.restart();
    hv = d.daemon.container.get<InMemoryHypervisor>(Hypervisor);
    agent = d.daemon.container.get<InMemoryGuestAgent>(GuestAgent);
    expect((await snapshotsOf('minimal')).map((s) => s.memory_mb)).to.deep.equal([512]);
    await captured('minimal', 2);
  });

  /** The 256 MB snapshot of minimal (1 cpu) once it is there, when `made` says it is the one looked for. */
  const recaptured = async (made: (s: Record<string, number>) => boolean) =>
    poll(
      async () => {
        const now = (await snapshotsOf('minimal')).find((s) => s.memory_mb === 256);
        return !!now && made(now);
      },
      { ms: 10_000, every: 25 },
    );

  it('drops a snapshot a copy of which fails, saying so: the next create of its shape boots and captures it again', async () => {
    const before = (await snapshotsOf('minimal')).find((s) => s.memory_mb === 256)!;
    hv.failNext('clone', "Could not open '/gone/minimal/disk.qcow2' (injected)");
    const r = await d.call('POST', '/vms?stream=1', { name: 'unshared', image: 'minimal', memory_mb: 256 });
    const last = (ndjson(r.text) as unknown as Line[]).at(-1)!;
    expect(last.phase, r.text).to.equal('error');
    expect(last.message).to.equal(
      "Could not open '/gone/minimal/disk.qcow2' (injected) (the snapshot of image minimal is dropped: the next create of this shape boots, and a new one is made after it)",
    );
    expect((await d.call('GET', '/vms/unshared')).status).to.equal(404);
    const lines = await create({ name: 'after-unshared', image: 'minimal', memory_mb: 256 });
    expect(lines.find((l) => l.phase === 'boot')!.message).to.match(
      /no snapshot of image minimal with 1 cpu\(s\) and 256 MB yet: one is made after this vm boots/,
    );
    await recaptured((s) => s.created_at !== before.created_at);
    expect((await d.call('DELETE', '/vms/after-unshared')).status).to.equal(200);
  });

  it('drops at its start a snapshot whose disk does not open (its image moved), and captures its shape again', async () => {
    const dir = join(d.config.data_dir, 'snapshots');
    const is256 = (key: string) => {
      const rec = JSON.parse(readFileSync(join(dir, key, 'snapshot.json'), 'utf8')) as Record<string, unknown>;
      return rec.image === 'minimal' && rec.cpus === 1 && rec.memory_mb === 256;
    };
    const key = readdirSync(dir).find(is256)!;
    const before = (await snapshotsOf('minimal')).find((s) => s.memory_mb === 256)!;
    writeFileSync(join(dir, key, FAKE_DISK_FAULT), "Could not open '/gone/minimal/disk.qcow2'");
    await d.restart();
    hv = d.daemon.container.get<InMemoryHypervisor>(Hypervisor);
    agent = d.daemon.container.get<InMemoryGuestAgent>(GuestAgent);
    // Made again of the same inputs: the same key, a new capture, without the fault.
    await recaptured((s) => s.created_at !== before.created_at);
    expect(readdirSync(dir).filter(is256)).to.deep.equal([key]);
    expect(existsSync(join(dir, key, FAKE_DISK_FAULT))).to.equal(false);
    // The 512 MB one, whose disk opens, stayed as it was.
    expect((await snapshotsOf('minimal')).map((s) => s.memory_mb).sort()).to.deep.equal([256, 512]);
    const lines = await create({ name: 'after-moved', image: 'minimal', memory_mb: 256 });
    expect(lines.map((l) => l.phase)).to.include('restore');
    expect((await d.call('DELETE', '/vms/after-moved')).status).to.equal(200);
  });

  it('captures an image it bakes in the default shape, so its first create restores', async () => {
    await create({ name: 'src', image: 'minimal', persistent: true });
    expect((await d.call('POST', '/vms/src/shutdown')).status).to.equal(200);
    const r = await d.call('POST', '/images', { name: 'baked', from_vm: 'src' });
    expect(r.status, r.text).to.equal(201);
    await captured('baked', 1);
    expect((await snapshotsOf('baked'))[0]).to.include({ cpus: 1, memory_mb: 512 });
    const lines = await create({ name: 'frombaked', image: 'baked' });
    expect(lines.map((l) => l.phase)).to.include('restore');
    for (const vm of ['src', 'frombaked']) await d.call('DELETE', `/vms/${vm}`);
    expect((await d.call('DELETE', '/images/baked')).status).to.equal(200);
  });

  it('refuses the names of its own guests', async () => {
    const r = await d.call('POST', '/vms', { name: 'svc-snapshot-abc' });
    expect(r.status).to.equal(400);
    expect(r.json.error).to.match(/names beginning with svc-snapshot- are the daemon's/);
  });

  it('removes the snapshots with their image', async () => {
    const dir = join(d.config.data_dir, 'snapshots');
    // 1 cpu with 256 MB and with 512 MB (the baked vm's source), 2 cpus with 512 MB.
    await captured('minimal', 3);
    expect(readdirSync(dir)).to.have.length(3);
    for (const v of (await d.call('GET', '/vms')).json as { name: string }[]) await d.call('DELETE', `/vms/${v.name}`);
    const r = await d.call('DELETE', '/images/minimal');
    expect(r.status, r.text).to.equal(200);
    expect(existsSync(dir) ? readdirSync(dir) : []).to.deep.equal([]);
  });
});

/** A capture takes as long as a boot: the image's delete and the daemon's stop call it off. */
describe('a capture under way (fake hypervisor, 2 s boots)', function () {
  this.timeout(60000);
  let d: TestDaemon;
  before(async () => {
    d = await startTestDaemon({ create_from_snapshot: true, fake_boot_delay: '2s' });
  });
  after(async () => d.stop());

  const snapshotFiles = () => {
    const dir = join(d.config.data_dir, 'snapshots');
    return existsSync(dir) ? readdirSync(dir) : [];
  };
  /** The snapshot's own guests the fake still runs. */
  const captureGuests = () =>
    d.daemon.container
      .get<InMemoryHypervisor>(Hypervisor)
      .running()
      .filter((n) => n.startsWith('svc-snapshot-'));
  const bootThenCapture = async (image: string) => {
    expect((await d.call('POST', '/vms', { name: 'first', image })).status).to.equal(201);
    expect((await d.call('DELETE', '/vms/first')).status).to.equal(200);
    await poll(() => captureGuests().length > 0, { ms: 20_000, every: 10 });
    expect(captureGuests()).to.have.length(1);
  };

  it('is called off by a delete of its image, which leaves no snapshot, file or guest behind', async () => {
    await bootThenCapture('minimal');
    const t0 = Date.now();
    const r = await d.call('DELETE', '/images/minimal');
    expect(r.status, r.text).to.equal(200);
    expect(Date.now() - t0).to.be.below(1500); // it did not wait for the capture's guest to boot
    expect(snapshotFiles()).to.deep.equal([]);
    expect(captureGuests()).to.deep.equal([]);
    await new Promise((r) => setTimeout(r, 2500)); // past when the guest would have booted
    expect(snapshotFiles()).to.deep.equal([]);
    expect((await d.call('GET', '/images/minimal')).status).to.equal(404);
  });

  it('is called off by the daemon stopping, and nothing is written after the stop has resolved', async () => {
    await bootThenCapture('debian');
    await d.daemon.stop();
    expect(snapshotFiles()).to.deep.equal([]);
    expect(captureGuests()).to.deep.equal([]);
    await new Promise((r) => setTimeout(r, 2500));
    expect(snapshotFiles()).to.deep.equal([]);
    await d.restart(); // for `after`: a daemon to stop
  });
});
