import { expect } from 'chai';
import type { VmChange } from '../../../src/domain/events.js';
import { world } from '../../fakes/world.js';
import { SystemClock } from '../../../src/adapters/clock/system-clock.js';
import type { ClusterSettings } from '../../../src/app/cluster-config.js';
import { Vms } from '../../../src/app/vms.js';
import { toPublic } from '../../../src/domain/vm.js';

describe('app/Vms change feed', () => {
  it('tells every change the API can see: reserved, each status, removed', async () => {
    const w = world();
    const seen: VmChange[] = [];
    const stop = w.vms.watch((c) => seen.push(c));
    await (
      await w.creates.create({ name: 'a', persistent: true }, {})
    ).done;
    await w.svc.pause('a');
    await w.svc.delete('a');
    stop();
    await (
      await w.creates.create({ name: 'b' }, {})
    ).done;
    const states = seen.map((c) => (c.event === 'vm' ? `${c.vm.name}:${c.vm.status}` : `${c.event}:${c.name}`));
    expect(states[0]).to.equal('a:creating');
    expect(states).to.include('a:running').and.to.include('a:paused');
    expect(states[states.length - 1]).to.equal('removed:a');
    expect(
      states.some((s) => s.startsWith('b:')),
      'unsubscribed',
    ).to.equal(false);
  });

  it('keeps warm pool members out of it until one is claimed, which appears under its new name', async () => {
    const w = world({ warm_pool: { template: 'tpl', size: 1 } });
    await (
      await w.creates.create({ name: 'tpl', persistent: true }, {})
    ).done;
    await w.svc.suspend('tpl');
    const seen: VmChange[] = [];
    w.vms.watch((c) => seen.push(c));
    w.pool.refill();
    await w.pool.settled();
    expect(seen, 'pool fill').to.deep.equal([]);
    await (
      await w.creates.create({ name: 'claimed', from_pool: true }, {})
    ).done;
    w.pool.stop();
    const names = new Set(seen.map((c) => (c.event === 'vm' ? c.vm.name : c.name)));
    expect([...names]).to.deep.equal(['claimed']);
  });

  it('names its node in every VM it holds on a node of a cluster (read, made, moved in), and none on one host', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'a', persistent: true }, {})
    ).done;
    expect(toPublic(w.vms.get('a'))).not.to.have.property('node');
    // The same records read by a daemon that is node n7 of a cluster.
    const node = new Vms(w.config, new SystemClock(), w.store, { node: 'n7' } as ClusterSettings);
    await node.load();
    expect(toPublic(node.get('a'))).to.include({ name: 'a', node: 'n7' });
    const seen: VmChange[] = [];
    node.watch((c) => seen.push(c));
    const made = node.reserve({ name: 'b', persistent: false, tags: {}, forwards: [], mounts: [] }, {
      id: 'minimal',
      agent_ready: true,
    } as never);
    expect(toPublic(made)).to.include({ node: 'n7' });
    // A VM moved in from another node said that node: it says this one now.
    node.admit({ ...toPublic(node.get('a')), name: 'c', node: 'n1' } as never);
    expect(node.get('c').node).to.equal('n7');
    expect(seen.map((c) => (c.event === 'vm' ? c.vm.node : c.event))).to.deep.equal(['n7', 'n7']);
    // Read again by a daemon without a cluster: no node.
    const alone = new Vms(w.config, new SystemClock(), w.store);
    await alone.load();
    expect(toPublic(alone.get('a'))).not.to.have.property('node');
  });
});
