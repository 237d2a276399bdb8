import { expect } from 'chai';
import type { VmChange } from '../../../src/domain/events.js';
import { world } from '../../fakes/world.js';

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
});
