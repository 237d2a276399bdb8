import { expect } from 'chai';
import { Activity } from '../../../src/app/activity.js';
import type { ClusterService } from '../../../src/app/cluster-service.js';
import { MoveService } from '../../../src/app/move-service.js';
import { ImageFetchService } from '../../../src/app/image-fetch-service.js';
import type { NodeView } from '../../../src/domain/cluster.js';
import { UnavailableError } from '../../../src/domain/errors.js';
import type { MoveOffer } from '../../../src/domain/move.js';
import type { Instance } from '../../../src/domain/vm.js';
import type { PeerNodes } from '../../../src/ports/cluster.js';
import { SilentLogger } from '../../fakes/fakes.js';
import { world, type World } from '../../fakes/world.js';

/**
 * The move service's decisions on the fake hypervisor, with the cluster and the other node stood
 * in for: what etcd says decides every step a daemon stop or a lost answer could cut off.
 */
describe('app/MoveService', () => {
  let w: World;
  let owners: Map<string, string>;
  let stale: boolean;
  let sent: MoveOffer[];
  let answer: (o: MoveOffer) => Promise<Instance>;
  let takenOver: string[];
  let restoredThere: string[];
  let restoreThere: (name: string, options: { paused?: boolean }) => Promise<Instance>;
  let pausedThere: string[];
  let pauseThere: (name: string) => Promise<void>;
  let moves: MoveService;
  /** What is placed on n1 already (MB of its 65,536). */
  let n1Memory: number;

  beforeEach(async () => {
    w = world();
    owners = new Map();
    stale = false;
    sent = [];
    takenOver = [];
    restoredThere = [];
    n1Memory = 0;
    answer = async (o) => ({ ...o.record }) as Instance;
    restoreThere = async (name, o) => ({ name, status: o.paused ? 'paused' : 'running' }) as Instance;
    pausedThere = [];
    pauseThere = async () => undefined;
    const node = (name: string): NodeView =>
      ({
        node: name,
        state: 'ready',
        images: ['debian'],
        tags: {},
        capacity: { cpus: 64, memory_mb: 65_536, disk_gb: 1024, vm_slots: 64 },
        allocated: { vms: 0, cpus: 0, memory_mb: name === 'n1' ? n1Memory : 0, disk_gb: 0 },
      }) as unknown as NodeView;
    const cluster = {
      self: 'n2',
      get stale() {
        return stale;
      },
      ownerOf: (name: string) => owners.get(name),
      node,
      nodes: () => [node('n1'), node('n2'), node('n3')],
      holders: () => [],
      takeOver: async (name: string, from: string) => {
        if (owners.get(name) !== from) throw new Error(`${name} is not ${from}'s`);
        owners.set(name, 'n2');
        takenOver.push(name);
      },
    } as unknown as ClusterService;
    const peers: PeerNodes = {
      sendVm: async (_n, o) => {
        sent.push(o);
        return answer(o);
      },
      restoreVm: async (_n, name, options = {}) => {
        restoredThere.push(options.paused ? `${name} paused` : name);
        return restoreThere(name, options);
      },
      pauseVm: async (_n, name) => {
        pausedThere.push(name);
        return pauseThere(name);
      },
      imageBundle: async () => {
        throw new Error('no other node has images here');
      },
      fetchImageFiles: async () => undefined,
      fetchImageOn: async () => undefined,
    };
    moves = new MoveService(
      cluster,
      peers,
      new ImageFetchService(cluster, peers, w.hv, new SilentLogger()),
      w.vms,
      w.svc,
      w.keeper,
      w.store,
      w.hv,
      w.hv,
      w.hv,
      w.container.get(Activity),
      { ...w.config, warm_pool: { ...w.config.warm_pool, template: 'd', size: 1 } },
      new SilentLogger(),
    );
    for (const name of ['a', 'b', 'c', 'd']) {
      await (
        await w.creates.create({ name, persistent: true }, {})
      ).done;
      await w.svc.shutdown(name);
      owners.set(name, 'n2');
    }
  });

  /** A persistent VM made here (n2), running and n2's in etcd. */
  const persistentHere = async (name: string) => {
    await (
      await w.creates.create({ name, persistent: true }, {})
    ).done;
    owners.set(name, 'n2');
  };

  it('sends a stopped VM without what only its host reads, and forgets its copy', async () => {
    const moved = await moves.move('a', { node: 'n3' });
    expect(moved).to.include({ name: 'a', node: 'n3' });
    expect(sent[0].record).not.to.have.property('leaving');
    expect(sent[0].record).not.to.have.property('runtime');
    expect(sent[0]).to.include({ from: 'n2', image_digest: 'fake:debian:1' });
    expect(w.vms.find('a')).to.equal(undefined);
    expect(w.store.records.has('a')).to.equal(false);
  });

  it('sends a VM moved without a node where the placement rule puts it among the others', async () => {
    n1Memory = 1024; // n1 fuller than n3: n3 takes it
    expect(await moves.move('a', {})).to.include({ name: 'a', node: 'n3' });
    n1Memory = 0;
    expect(await moves.move('b', undefined)).to.include({ name: 'b', node: 'n1' });
    expect(sent.map((o) => o.record.name)).to.deep.equal(['a', 'b']);
  });

  it("keeps this node's warm pool template, saying why", async () => {
    const err = await moves.move('d', { node: 'n3' }).catch((e: Error) => e.message);
    expect(err).to.equal("vm d is the template of node n2's warm pool (warm_pool.template); it stays");
    expect(sent).to.deep.equal([]);
    expect(w.vms.get('d').status).to.equal('stopped');
  });

  it('keeps the VM when the other node refuses or cannot be reached, and forgets it when etcd says it got there', async () => {
    answer = async () => {
      throw new UnavailableError('node n3 did not answer');
    };
    const err = await moves.move('a', { node: 'n3' }).catch((e: Error) => e);
    expect((err as Error).message).to.equal('node n3 did not answer');
    expect(w.vms.get('a')).to.include({ status: 'stopped' });
    expect(w.store.records.get('a')).not.to.have.property('leaving');
    // The answer was lost after the other node took it: etcd says so, and the copy here goes.
    answer = async (o) => {
      owners.set(o.record.name, 'n3');
      throw new UnavailableError('connection reset');
    };
    expect(await moves.move('a', { node: 'n3' })).to.include({ name: 'a', node: 'n3' });
    expect(w.vms.find('a')).to.equal(undefined);
  });

  it('moves a running VM suspended and has it restored there; restores it here when the move fails', async () => {
    await persistentHere('r');
    const moved = await moves.move('r', { node: 'n3' });
    expect(moved).to.include({ name: 'r', node: 'n3', status: 'running' });
    expect(sent.map((o) => [o.record.name, o.record.status])).to.deep.equal([['r', 'suspended']]);
    expect(sent[0].state_key, 'its saved state is offered with its key').to.equal('fake');
    expect(w.hv.suspends.get('r'), 'saved for the other node: nothing made for a restore here').to.include({
      forMove: true,
    });
    expect(restoredThere).to.deep.equal(['r']);
    expect(w.vms.find('r')).to.equal(undefined);

    // The other node refuses it: it is restored here, running on as before, and the error said.
    await persistentHere('s');
    answer = async () => {
      throw new UnavailableError('node n3 did not answer');
    };
    expect(await moves.move('s', { node: 'n3' }).catch((e: Error) => e.message)).to.equal('node n3 did not answer');
    expect(w.vms.get('s')).to.include({ status: 'running' });
    expect(w.store.records.get('s')).not.to.have.property('leaving');
    // And when its restore here fails too, the error says where it is.
    w.hv.failNext('launch', 'no room for its QEMU');
    expect(await moves.move('s', { node: 'n3' }).catch((e: Error) => e.message)).to.equal(
      'node n3 did not answer; vm s stays here suspended (its restore failed: no room for its QEMU)',
    );
    expect(w.vms.get('s')).to.include({ status: 'suspended' });
    await w.svc.restore('s');

    // It moved but did not restore there: the answer says so, the VM suspended on its new node.
    answer = async (o) => ({ ...o.record }) as Instance;
    restoreThere = async () => {
      throw new UnavailableError('node n3 did not answer POST /vms/s/restore');
    };
    const half = await moves.move('s', { node: 'n3' });
    expect(half).to.include({ name: 's', node: 'n3', status: 'suspended' });
    expect(half.warning).to.equal(
      'moved to node n3 but not restored there: node n3 did not answer POST /vms/s/restore; it is suspended there (restore it)',
    );
    expect(w.vms.find('s')).to.equal(undefined);

    // What cannot move is refused before it is suspended: ephemeral, on that node already, no room there.
    await persistentHere('t');
    expect(await moves.move('t', { node: 'n2' }).catch((e: Error) => e.message)).to.equal('vm t is on node n2 already');
    await (
      await w.creates.create({ name: 'e' }, {})
    ).done;
    expect(await moves.move('e', { node: 'n3' }).catch((e: Error) => e.message)).to.match(
      /vm e is ephemeral: it cannot be suspended for a move/,
    );
    n1Memory = 65_536 - 100;
    expect(await moves.move('t', { node: 'n1' }).catch((e: Error) => e.message)).to.match(
      /^node n1 has no room left for vm t$/,
    );
    expect(['t', 'e'].map((n) => w.vms.get(n).status)).to.deep.equal(['running', 'running']);
    expect(sent.map((o) => o.record.name)).to.deep.equal(['r', 's', 's', 's']);
  });

  it('moves a paused VM suspended and restored paused there; puts it back paused when the move fails', async () => {
    await persistentHere('p');
    await w.svc.pause('p');
    // The other node refuses it: restored here paused, as it was, its guest not run.
    answer = async () => {
      throw new UnavailableError('node n3 did not answer');
    };
    expect(await moves.move('p', { node: 'n3' }).catch((e: Error) => e.message)).to.equal('node n3 did not answer');
    expect(w.vms.get('p')).to.include({ status: 'paused', wake_at_resume: true });
    expect(w.hv.state('p')).to.equal('paused');
    expect(pausedThere).to.deep.equal([]);
    // A restore that cold-boots runs the guest: paused after it, and when that pause fails the error says it runs here.
    w.hv.failNext('restore');
    w.hv.failNext('pause', 'the monitor did not answer');
    expect(await moves.move('p', { node: 'n3' }).catch((e: Error) => e.message)).to.equal(
      'node n3 did not answer; vm p runs here (its pause failed: the monitor did not answer)',
    );
    expect(w.vms.get('p')).to.include({ status: 'running' });
    await w.svc.pause('p');

    answer = async (o) => ({ ...o.record }) as Instance;
    const moved = await moves.move('p', { node: 'n3' });
    expect(moved).to.include({ name: 'p', node: 'n3', status: 'paused' });
    expect(moved).not.to.have.property('warning');
    expect(sent.map((o) => [o.record.name, o.record.status])).to.deep.equal([
      ['p', 'suspended'],
      ['p', 'suspended'],
      ['p', 'suspended'],
    ]);
    expect([restoredThere, pausedThere]).to.deep.equal([['p paused'], []]);
    expect(w.vms.find('p')).to.equal(undefined);

    // Restored there running (it cold-booted there) and its pause refused: it runs there, and the answer says so.
    await persistentHere('q');
    await w.svc.pause('q');
    restoreThere = async (name) => ({ name, status: 'running' }) as Instance;
    pauseThere = async () => {
      throw new UnavailableError('connection reset');
    };
    const half = await moves.move('q', {});
    expect(half).to.include({ name: 'q', status: 'running' });
    expect(half.warning).to.equal(
      `moved to node ${half.node} and restored there, but not paused again: connection reset; it runs there`,
    );
    // An ephemeral paused VM cannot be suspended: it stays, paused.
    await (
      await w.creates.create({ name: 'e' }, {})
    ).done;
    await w.svc.pause('e');
    expect(await moves.move('e', { node: 'n3' }).catch((e: Error) => e.message)).to.match(
      /vm e is ephemeral: it cannot be suspended for a move/,
    );
    expect(w.vms.get('e')).to.include({ status: 'paused' });
  });

  it('drains every VM that can move, a running one restored where it went', async () => {
    await persistentHere('r');
    await w.svc.start('b');
    await w.svc.suspend('b');
    const drained = await moves.drain();
    expect(drained.moved.map((m) => m.name)).to.deep.equal(['a', 'b', 'c', 'r']);
    expect(drained.refused).to.deep.equal([
      { name: 'd', reason: "vm d is the template of node n2's warm pool (warm_pool.template); it stays" },
    ]);
    expect(sent.map((o) => [o.record.name, o.record.status])).to.deep.equal([
      ['a', 'stopped'],
      ['b', 'suspended'],
      ['c', 'stopped'],
      ['r', 'suspended'],
    ]);
    expect(restoredThere, 'only the one that ran is restored there').to.deep.equal(['r']);
  });

  it('finishes at start what a stop cut off, by what etcd says, and waits while etcd cannot be read', async () => {
    const mark = async (name: string, o: { leaving?: string; arriving?: string }) => {
      const rec = w.vms.get(name);
      Object.assign(rec, o);
      await w.vms.save(rec);
    };
    await mark('a', { leaving: 'n3' }); // n3 has it now: the copy here goes
    owners.set('a', 'n3');
    await mark('b', { leaving: 'n3' }); // still ours: kept
    await mark('c', { arriving: 'n1' }); // ours now: kept
    await mark('d', { arriving: 'n1' }); // still n1's: the copy here goes
    owners.set('d', 'n1');
    stale = true;
    await moves.settle();
    expect(['a', 'b', 'c', 'd'].map((n) => !!w.vms.find(n))).to.deep.equal([true, true, true, true]);
    stale = false;
    await moves.settle();
    expect(['a', 'b', 'c', 'd'].filter((n) => w.vms.find(n))).to.deep.equal(['b', 'c']);
    for (const n of ['b', 'c']) {
      expect(w.store.records.get(n)).not.to.have.property('leaving');
      expect(w.store.records.get(n)).not.to.have.property('arriving');
    }
    expect([...w.store.records.keys()].sort()).to.deep.equal(['b', 'c']);
  });

  it('takes in an offer only when the cluster says the sender has it and the image and saved state match here', async () => {
    const offer = (o: Partial<MoveOffer> = {}, rec: Record<string, unknown> = {}): MoveOffer => {
      const r = { ...w.vms.get('a'), name: 'x', ...rec };
      return { from: 'n1', image_digest: 'fake:debian:1', record: r, ...o } as MoveOffer;
    };
    const noFill = async () => undefined;
    const refused = (o: MoveOffer) =>
      moves.receive(o, noFill).then(
        () => 'taken',
        (e: Error) => e.message,
      );
    expect(await refused(offer())).to.match(/the cluster says vm x is on node \(none\), not n1/);
    owners.set('x', 'n1');
    expect(await refused(offer({ image_digest: 'fake:debian:7' }))).to.match(
      /image debian on node n2 is not the one vm x was made of/,
    );
    expect(await refused(offer({}, { image: 'ssh-only-gone' }))).to.match(
      /node n2 has no image ssh-only-gone, and no node it can fetch it from/,
    );
    expect(await refused(offer({ state_key: 'other-qemu' }, { status: 'suspended' }))).to.match(
      /suspended by a hypervisor that node n2 does not match/,
    );
    expect(await refused(offer({}, { status: 'running' }))).to.match(/a vm is carried stopped or suspended/);
    expect(await refused(offer({}, { name: 'a' }))).to.match(/vm a already exists on node n2/);
    expect(w.vms.find('x')).to.equal(undefined);
    expect(takenOver).to.deep.equal([]);
    const taken = await moves.receive(offer({ state_key: 'fake' }, { status: 'suspended' }), noFill);
    expect(taken).to.include({ name: 'x', node: 'n2', status: 'suspended' });
    expect(takenOver).to.deep.equal(['x']);
    expect(w.store.records.get('x')).not.to.have.property('arriving');
    // The fake hypervisor took it in with its saved state: a restore loads it.
    await w.svc.restore('x');
    expect(w.vms.get('x').status).to.equal('running');
  });
});
