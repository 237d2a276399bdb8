import { expect } from 'chai';
import { readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { guestSh, startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { SilentLogger } from '../fakes/fakes.js';
import { ndjson } from '../helpers/http.js';
import { sshHostKey } from '../helpers/ssh-host-key.js';
import { ensureImage, qemuProcesses, snapshotQemus } from './image.js';
import { poll } from '../helpers/wait.js';

interface Line {
  phase: string;
  message: string;
}

/** Creates restored from the image's snapshot (docs/snapshot-creates.md), on real QEMU guests of `minimal`. */
describe('svcd with QEMU: creates restored from the image snapshot', function () {
  this.timeout(300_000);
  let d: TestDaemon;
  const shared = tempDir('svc-snapc-share-');
  const sh = async (vm: string, script: string) => (await guestSh(d, vm, script)).stdout.trim();
  const create = async (body: Record<string, unknown>, query = ''): Promise<Line[]> => {
    const r = await d.call('POST', `/vms?stream=1${query}`, body);
    expect(r.status, r.text).to.equal(200);
    const lines = ndjson(r.text) as unknown as Line[];
    expect(lines.at(-1)!.phase, r.text).to.equal('ready');
    return lines;
  };
  const snapshots = async () => (await d.call('GET', '/images/minimal')).json.snapshots as Record<string, number>[];
  const captured = async () => {
    await poll(async () => (await snapshots()).length !== 0, { ms: 120_000, every: 500 });
    expect(await snapshots()).to.have.length(1);
  };
  const names = ['first', 'a', 'b', 'mounted', 'c', 'a-clone'];

  before(async () => {
    d = await startTestDaemon(
      {
        hypervisor: 'qemu',
        images_dir: ensureImage(),
        image: 'minimal',
        memory_mb: 256,
        sandbox_metrics_enabled: false,
        create_from_snapshot: true,
        mount_dirs: [shared],
      },
      { logger: new SilentLogger() },
    );
  });
  after(async () => {
    for (const i of (await d.call('GET', '/vms')).json as { name: string }[]) await d.call('DELETE', `/vms/${i.name}`);
    const dataDir = d.config.data_dir;
    await d.stop();
    expect(qemuProcesses(dataDir, names)).to.deep.equal([]);
    // The capture the last restart started was under way: the daemon's stop ended its guest.
    expect(snapshotQemus(dataDir)).to.deep.equal([]);
  });

  it('boots the first create, saying why, and captures the booted guest after it', async () => {
    const lines = await create({ name: 'first' });
    expect(lines.find((l) => l.phase === 'boot')!.message).to.match(
      /\(not from a snapshot: no snapshot of image minimal with 1 cpu\(s\) and 256 MB yet: one is made after this vm boots\)$/,
    );
    await captured();
    const [snap] = await snapshots();
    expect(snap).to.include({ cpus: 1, memory_mb: 256, disk_gb: 4 });
    expect(snap.size_bytes).to.be.above(1 << 20);
  });

  it('restores two creates, each its own machine with its own disk size, clock and userdata', async () => {
    const ud = '#!/bin/sh\nhostname > /root/ud-ran\n';
    const [la, lb] = await Promise.all(
      ['a', 'b'].map((name) => create({ name, disk_gb: 5, userdata: ud, persistent: true }, '&wait=userdata')),
    );
    for (const lines of [la, lb]) {
      expect(lines.map((l) => l.phase)).to.include('restore');
      expect(lines.map((l) => l.phase)).to.not.include('boot');
    }
    const facts = async (vm: string) =>
      (
        await sh(vm, 'hostname; cat /etc/machine-id; cat /proc/sys/kernel/random/uuid; cat /root/ud-ran; date +%s')
      ).split('\n');
    const before = Date.now() / 1000;
    const [fa, fb] = await Promise.all([facts('a'), facts('b')]);
    const after = Date.now() / 1000;
    expect(fa[0]).to.equal('a');
    expect(fb[0]).to.equal('b');
    expect(fa[1]).to.match(/^[0-9a-f]{32}$/);
    expect(fa[1]).to.not.equal(fb[1]);
    expect(fa[2]).to.not.equal(fb[2]);
    // The userdata ran in each, after it had its name.
    expect(fa[3]).to.equal('a');
    expect(fb[3]).to.equal('b');
    // Each clock, read while its exec ran, within two seconds of the host's (the snapshot's own is
    // older by the restores, tens of seconds under TCG): a whole-second `date -s` where the guest has
    // no svc-sys, and the last identity call's way into a guest of a loaded host.
    for (const f of [fa, fb]) expect(Number(f[4])).to.be.within(Math.floor(before) - 2, after + 1);
    // Each disk is the size asked for, the root filesystem grown into it.
    for (const vm of ['a', 'b']) {
      const kb = Number(await sh(vm, "df -k / | awk 'NR==2 {print $2}'"));
      expect(kb, vm).to.be.within(4.7 * 2 ** 20, 5 * 2 ** 20);
    }
    const port = async (vm: string) => (await d.call('GET', `/vms/${vm}`)).json.ssh_port as number;
    const keys = await Promise.all(['first', 'a', 'b'].map(async (vm) => sshHostKey(await port(vm), vm)));
    expect(new Set(keys).size).to.equal(3);
  });

  it('restores a create with a host folder, the folder added and mounted as it wakes', async () => {
    writeFileSync(join(shared, 'hello'), 'from the host');
    const lines = await create({ name: 'mounted', mounts: [{ host: shared, guest: '/mnt/shared' }] });
    expect(lines.map((l) => l.phase)).to.include('restore');
    expect(lines.some((l) => l.phase === 'boot')).to.equal(false);
    expect(await sh('mounted', 'cat /mnt/shared/hello; echo; hostname')).to.equal('from the host\nmounted');
    await d.call('DELETE', '/vms/mounted');
  });

  it('suspends, restores and clones a vm made from the snapshot', async () => {
    await sh('a', 'echo kept > /root/kept; sync');
    expect((await d.call('POST', '/vms/a/suspend')).status).to.equal(200);
    expect((await d.call('POST', '/vms/a/restore')).status).to.equal(200);
    expect(await sh('a', 'cat /root/kept; hostname')).to.equal('kept\na');
    expect((await d.call('POST', '/vms/a/shutdown')).status).to.equal(200);
    const r = await d.call('POST', '/vms', { name: 'a-clone', from: 'a' });
    expect(r.status, r.text).to.equal(201);
    expect(await sh('a-clone', "cat /root/kept; hostname; df -k / | awk 'NR==2 {print $2}'")).to.match(
      /^kept\na-clone\n\d+$/,
    );
  });

  it('restores from the snapshot after a daemon restart, and drops one made of other inputs', async () => {
    await d.restart();
    const lines = await create({ name: 'c' });
    expect(lines.map((l) => l.phase)).to.include('restore');
    expect(await sh('c', 'hostname')).to.equal('c');
    // A snapshot whose key is not what this daemon's inputs make (another agent, another QEMU) is
    // removed at the start, and creates boot until it is captured again.
    const root = join(d.config.data_dir, 'snapshots');
    const [key] = readdirSync(root);
    const other = 'f'.repeat(24);
    const rec = JSON.parse(readFileSync(join(root, key, 'snapshot.json'), 'utf8'));
    writeFileSync(join(root, key, 'snapshot.json'), JSON.stringify({ ...rec, key: other }));
    renameSync(join(root, key), join(root, other));
    await d.call('DELETE', '/vms/c');
    await d.restart();
    expect(readdirSync(root)).to.not.include(other);
    const again = await create({ name: 'c' });
    expect(again.find((l) => l.phase === 'boot')!.message).to.match(/not from a snapshot/);
  });
});
