import { expect } from 'chai';
import { Etcd3 } from 'etcd3';
import { EtcdClusterStore } from '../../src/adapters/cluster/etcd-cluster-store.js';
import type { ClusterSettings } from '../../src/app/cluster-config.js';
import type { NodeInfo } from '../../src/domain/cluster.js';
import type { Instance } from '../../src/domain/vm.js';
import type { ClusterChange } from '../../src/ports/cluster.js';
import type { Logger } from '../../src/ports/logger.js';
import { etcdTempDir, startEtcd, type TestEtcd } from '../helpers/etcd.js';
import { poll } from '../helpers/wait.js';

const quiet: Logger = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
const CAPACITY = { cpus: 8, memory_mb: 8192, disk_gb: 100, vm_slots: 10 };
const SHAPE = { cpus: 1, memory_mb: 256, disk_gb: 2 };

/**
 * The etcd store as two nodes see it, on a real one-member etcd: what one node writes, the other
 * can read at once from etcd itself (`look`), and its watch then brings nothing twice.
 */
describe('the cluster store on a real etcd: reading a VM another node placed a moment ago', function () {
  this.timeout(30_000);
  let etcd: TestEtcd;
  const stores: EtcdClusterStore[] = [];
  /** What each node says of itself (a test changes it, then asks the node to say it). */
  const infos: Record<string, NodeInfo> = {};
  const prefix = `/svc-store-test-${process.pid}/`;

  const join = async (node: string) => {
    const s: ClusterSettings = {
      etcd: etcd.endpoints,
      node,
      advertise: `http://127.0.0.1:1/${node}`,
      token: 't',
      prefix,
      lease_ttl_ms: 2000,
      tags: {},
      capacity: CAPACITY,
    };
    const store = new EtcdClusterStore(s, quiet);
    const info: NodeInfo = {
      node,
      advertise: s.advertise,
      capacity: CAPACITY,
      images: [],
      hypervisor: 'fake',
      tags: {},
      version: 'test',
      started_at: new Date().toISOString(),
      seen_at: '',
      running: 0,
    };
    infos[node] = info;
    await store.join(async () => infos[node]);
    stores.push(store);
    return store;
  };

  /** What `store` says is placed on `node` now. */
  const loadOf = (store: EtcdClusterStore, node: string) => store.nodes().find((n) => n.node === node)!.allocated;
  /** Places `name` on node a; once `seenBy` shows it, the load before it and a reader of the load now. */
  const placeOnA = async (name: string, seenBy: EtcdClusterStore) => {
    const load = () => loadOf(seenBy, 'a');
    const before = { ...load() };
    await stores[0].reserve([name], 'a', SHAPE, () => undefined);
    await until(() => load().vms === before.vms + 1);
    return { load, before };
  };
  /** A node's load with one more VM of `shape` on it. */
  const oneMore = (l: { vms: number; cpus: number; memory_mb: number; disk_gb: number }, shape: typeof SHAPE) => ({
    vms: l.vms + 1,
    cpus: l.cpus + shape.cpus,
    memory_mb: l.memory_mb + shape.memory_mb,
    disk_gb: l.disk_gb + shape.disk_gb,
  });
  /** Until `ok` holds (a watch brings what was written), or 20 s: the `expect` after it says what is not so. */
  const until = (ok: () => boolean) => poll(ok, { ms: 20_000, every: 20 });

  before(async () => {
    etcd = await startEtcd(etcdTempDir('svc-etcd-store-'), 1);
  });

  after(async () => {
    await Promise.all(stores.map((s) => s.leave()));
    await etcd?.stop();
  });

  it('answers look() with the entry as soon as the other node placed it, and tells its listeners once', async () => {
    const [a, b] = [await join('a'), await join('b')];
    const seen: ClusterChange[] = [];
    b.watch((c) => c.kind === 'vm' && seen.push(c));
    for (let i = 0; i < 20; i++) {
      await a.reserve([`v${i}`], 'a', SHAPE, () => undefined);
      // Read from etcd itself: whether or not b's watch has brought it yet.
      expect(await b.look(`v${i}`), `v${i}`).to.include({ node: 'a' });
      expect(b.vm(`v${i}`)).to.include({ node: 'a' });
    }
    expect(await b.look('never-made')).to.equal(undefined);
    // The watch brings each put as well: the copy had it, so the listeners hear of each once.
    await new Promise((r) => setTimeout(r, 500));
    expect(seen.map((c) => c.kind === 'vm' && c.name).sort()).to.deep.equal(
      Array.from({ length: 20 }, (_, i) => `v${i}`).sort(),
    );
    // A delete reaches b's copy, and a later look does not bring the entry back.
    await a.release('v0');
    await until(() => !b.vm('v0'));
    expect(b.vm('v0')).to.equal(undefined);
    expect(await b.look('v0')).to.equal(undefined);
    expect(
      seen.filter((c) => c.kind === 'vm' && c.name === 'v0').map((c) => c.kind === 'vm' && !!c.entry),
    ).to.deep.equal([true, false]);
    expect(b.nodes().find((n) => n.node === 'a')?.allocated.vms).to.equal(19);
    // One node by key (what routing a call reads) is the same view as in the whole list.
    expect(b.nodes().map((n) => n.node)).to.deep.equal(['a', 'b']);
    for (const n of b.nodes()) expect(b.node(n.node)).to.deep.equal(n);
    expect(b.node('nobody')).to.equal(undefined);
  });

  it('places many names in one transaction: all of them or none, and the other node never sees a part', async () => {
    const [a, b] = stores;
    const loads: number[] = [];
    const unwatch = b.watch(() => loads.push(b.nodes().find((n) => n.node === 'a')!.allocated.vms));
    try {
      const before = a.nodes().find((n) => n.node === 'a')!.allocated.vms; // 19, from the test above
      // One name of the three is taken: nothing is placed.
      await a.reserve(['m1'], 'a', SHAPE, () => undefined);
      let err: unknown;
      await a.reserve(['m2', 'm1', 'm3'], 'a', SHAPE, () => undefined).catch((e) => (err = e));
      expect(String(err)).to.match(/vm m1 already exists \(on node a\)/);
      // A check that refuses: nothing is placed either.
      err = undefined;
      await a
        .reserve(['m2', 'm3'], 'a', SHAPE, () => {
          throw new Error('no room');
        })
        .catch((e) => (err = e));
      expect(String(err)).to.contain('no room');
      // 99 at once (a fork's most, with the one above: 100).
      const many = Array.from({ length: 99 }, (_, i) => `f${i}`);
      await a.reserve(many, 'a', SHAPE, () => undefined);
      await until(() => b.nodes().find((n) => n.node === 'a')!.allocated.vms >= before + 100);
      expect(b.nodes().find((n) => n.node === 'a')!.allocated).to.deep.include({
        vms: before + 100,
        memory_mb: (before + 100) * SHAPE.memory_mb,
      });
      for (const name of ['m2', 'm3']) expect(await b.look(name), name).to.equal(undefined);
      expect(b.vm('f98')).to.include({ node: 'a' });
      // b's copy went from before+1 to before+100 with no count between.
      expect([...new Set(loads)].filter((n) => n > before + 1 && n < before + 100)).to.deep.equal([]);
      // And back in one transaction (a fork of 100 that failed): from before+100 to before, with no
      // count between; a name never placed and another node's filter change nothing.
      loads.length = 0;
      await a.release(['m1', ...many, 'never-placed'], 'b');
      expect(a.nodes().find((n) => n.node === 'a')!.allocated.vms).to.equal(before + 100);
      await a.release(['m1', ...many, 'never-placed']);
      await a.release(['m1', ...many]); // again: nothing left to give back
      await until(() => b.nodes().find((n) => n.node === 'a')!.allocated.vms <= before);
      expect(b.nodes().find((n) => n.node === 'a')!.allocated).to.deep.include({
        vms: before,
        memory_mb: before * SHAPE.memory_mb,
      });
      expect(await b.look('f0')).to.equal(undefined);
      expect([...new Set(loads)].filter((n) => n > before && n < before + 100)).to.deep.equal([]);
    } finally {
      unwatch();
      await a.release(['m1', ...Array.from({ length: 99 }, (_, i) => `f${i}`)]);
    }
  });

  it("holds a VM's new shape when its node publishes it changed (an edit): the node's load moves by the difference", async () => {
    const [a, b] = stores;
    const { load, before } = await placeOnA('sh1', b);
    const grown = { cpus: 3, memory_mb: 1024, disk_gb: 5 };
    await a.publish({ name: 'sh1', status: 'stopped', ...grown } as Instance);
    await until(() => load().memory_mb === before.memory_mb + grown.memory_mb);
    expect(load()).to.deep.include(oneMore(before, grown));
    expect(b.vm('sh1')).to.deep.include({ shape: grown });
    // Published again unchanged: the load stays; released: all of the new shape is given back.
    await a.publish({ name: 'sh1', status: 'running', ...grown } as Instance);
    await a.release('sh1');
    await until(() => load().vms === before.vms);
    expect(load()).to.deep.include(before);
  });

  it('reshapes a VM ahead of its change (an edit, a revert): checked without its old shape, all or nothing', async () => {
    const [a, b] = stores;
    const { load, before } = await placeOnA('rs1', a);
    const grown = { cpus: 4, memory_mb: 2048, disk_gb: 8 };
    // The check sees the node as it would be without the VM: what the new shape must fit beside.
    const seen: unknown[] = [];
    await a.reshape('rs1', grown, (n) => void seen.push({ ...n.allocated }));
    expect(seen).to.deep.equal([before]);
    await until(() => load().cpus === before.cpus + grown.cpus);
    expect(load()).to.deep.include(oneMore(before, grown));
    expect((await b.look('rs1'))?.shape).to.deep.equal(grown);
    // A check that refuses: nothing changes.
    let err: unknown;
    await a
      .reshape('rs1', { ...grown, cpus: 64 }, () => {
        throw new Error('no room');
      })
      .catch((e: unknown) => (err = e));
    expect(String(err)).to.match(/no room/);
    expect((await b.look('rs1'))?.shape).to.deep.equal(grown);
    // The same shape, or a VM with no entry: nothing to do, nothing checked.
    await a.reshape('rs1', grown, () => expect.fail('checked'));
    await a.reshape('never-placed', grown, () => expect.fail('checked'));
    // Only the VM's node reshapes it.
    err = undefined;
    await b.reshape('rs1', SHAPE, () => undefined).catch((e: unknown) => (err = e));
    expect(String(err)).to.match(/vm rs1 is on node a, not on node b/);
    // Back to the old shape, then released: the node's load is what it was.
    await a.reshape('rs1', SHAPE, () => undefined);
    await a.release('rs1');
    await until(() => load().vms === before.vms);
    expect(load()).to.deep.include(before);
  });

  it('keeps the newer of a look and a watch event whichever comes first', async () => {
    const [a, b] = stores;
    const raw = new Etcd3({ hosts: etcd.endpoints });
    try {
      // Two writes in a row: a look in between may read the first or the second, the watch brings
      // both in order; the copy ends with the second either way.
      for (let i = 0; i < 10; i++) {
        const key = `${prefix}vms/r${i}`;
        await raw.put(key).value(JSON.stringify({ node: 'a', shape: SHAPE, round: 1 }));
        const looked = b.look(`r${i}`);
        await raw.put(key).value(JSON.stringify({ node: 'a', shape: SHAPE, round: 2 }));
        await looked;
      }
      await new Promise((r) => setTimeout(r, 500));
      for (let i = 0; i < 10; i++) expect(b.vm(`r${i}`), `r${i}`).to.include({ round: 2 } as never);
      expect(a.vm('r9')).to.include({ round: 2 } as never);
    } finally {
      raw.close();
    }
  });

  it('says a change when asked (a drain), in its lease and its kept entry, before it answers; refuses when etcd is gone', async () => {
    const a = stores[0];
    const raw = new Etcd3({ hosts: etcd.endpoints });
    const said = async (key: string) => JSON.parse((await raw.get(`${prefix}${key}`).string()) ?? '{}') as NodeInfo;
    try {
      infos.a = { ...infos.a, draining: true };
      await a.announce();
      // read straight from etcd right after the answer: a node killed now comes back drained
      expect(await said('members/a')).to.include({ draining: true });
      expect(await said('nodes/a')).to.include({ draining: true });
      const { draining: _, ...undrained } = infos.a;
      infos.a = undrained;
      await a.announce();
      expect((await said('members/a')).draining).to.equal(undefined);
    } finally {
      raw.close();
    }
    // the last test here: etcd stops
    await etcd.stop();
    infos.a = { ...infos.a, draining: true };
    const err = await a.announce().catch((e: unknown) => e);
    expect((err as Error).message).to.match(/etcd did not take what this node says of itself/);
  });
});
