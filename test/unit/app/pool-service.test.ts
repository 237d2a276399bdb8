import { expect } from 'chai';
import { world } from '../../fakes/world.js';

async function template(raw: Record<string, unknown>) {
  const w = world(raw);
  await (
    await w.creates.create({ name: 'tpl', persistent: true }, {})
  ).done;
  await w.svc.suspend('tpl');
  return w;
}

describe('app/PoolService', () => {
  it('fills the pool to its size with suspended clones that the vm list does not show', async () => {
    const w = await template({ warm_pool: { template: 'tpl', size: 2 } });
    w.pool.refill();
    await w.pool.settled();
    const st = w.pool.status();
    expect(st).to.include({ template: 'tpl', size: 2, running: false, ready: 2 });
    expect(st.members.map((m) => m.status)).to.deep.equal(['suspended', 'suspended']);
    expect(w.vms.list().map((i) => i.name)).to.deep.equal(['tpl']);
    // Nobody waits on a member being filled: it starts in the background; a claim's restore does not.
    for (const m of st.members) expect(w.hv.background(m.name)).to.equal(true);
    w.pool.stop();
    await (
      await w.creates.create({ name: 'mine', from_pool: true }, {})
    ).done;
    expect(w.hv.background('mine')).to.equal(false);
  });

  it('hands each concurrent claim a different member and refills behind them', async () => {
    const w = await template({ warm_pool: { template: 'tpl', size: 2, refill_delay: '0s' } });
    w.pool.refill();
    await w.pool.settled();
    const before = w.pool.status().members.map((m) => m.name);
    const jobs = await Promise.all([
      w.creates.create({ name: 'a', from_pool: true }, {}),
      w.creates.create({ name: 'b', from_pool: true }, {}),
    ]);
    await Promise.all(jobs.map((j) => j.done));
    const claimedFrom = w.activity.events
      .filter((e) => e.action === 'create' && e.message?.startsWith('claimed'))
      .map((e) => e.message);
    expect(claimedFrom.sort()).to.deep.equal(before.map((n) => `claimed ${n}`).sort());
    await w.pool.settled();
    expect(w.pool.status().ready).to.equal(2);
    w.pool.stop();
  });

  it('starts refilling only once a claim has answered, so the refill does not compete with it', async () => {
    const w = await template({ warm_pool: { template: 'tpl', size: 1, refill_delay: '0s' } });
    w.pool.refill();
    await w.pool.settled();
    const claimAtRefill: (string | undefined)[] = [];
    const launch = w.hv.launch.bind(w.hv);
    w.hv.launch = async (spec, o) => {
      if (spec.name.startsWith('pool-')) claimAtRefill.push(w.vms.find('a')?.status);
      if (spec.name === 'a') await new Promise((r) => setTimeout(r, 100)); // a restore takes a while
      return launch(spec, o);
    };
    await (
      await w.creates.create({ name: 'a', from_pool: true }, {})
    ).done;
    await w.pool.settled();
    expect(claimAtRefill).to.deep.equal(['running']);
    expect(w.pool.status().ready).to.equal(1);
    w.pool.stop();
  });

  it('refills once claims have stopped coming for refill_delay, not beside each claim of a burst', async () => {
    const w = await template({ warm_pool: { template: 'tpl', size: 3, refill_delay: '150ms' } });
    w.pool.refill();
    await w.pool.settled();
    const refillsAt: number[] = [];
    const launch = w.hv.launch.bind(w.hv);
    w.hv.launch = async (spec, o) => {
      if (spec.name.startsWith('pool-')) refillsAt.push(Date.now());
      return launch(spec, o);
    };
    let lastClaim = 0;
    for (const name of ['a', 'b', 'c']) {
      await (
        await w.creates.create({ name, from_pool: true }, {})
      ).done;
      lastClaim = Date.now();
      await new Promise((r) => setTimeout(r, 60)); // the next claim comes before the wait is over
    }
    expect(refillsAt, 'no refill during the burst').to.deep.equal([]);
    await w.pool.settled();
    expect(refillsAt).to.have.length(3);
    expect(refillsAt[0] - lastClaim).to.be.at.least(140);
    expect(w.pool.status().ready).to.equal(3);
    w.pool.stop();
  });

  it('keeps members running for a running pool, and a claim keeps the same process', async () => {
    const w = await template({ warm_pool: { template: 'tpl', size: 1, running: true } });
    w.pool.refill();
    await w.pool.settled();
    const [m] = w.pool.status().members;
    expect(m.status).to.equal('running');
    expect(w.hv.background(m.name)).to.equal(false); // it will be someone's VM as it runs
    w.pool.stop(); // no refill: the member's old name must stay unused
    const claimed = await (
      await w.creates.create({ name: 'r', from_pool: true, forwards: [{ host_port: 0, guest_port: 81 }] }, {})
    ).done;
    expect(claimed.status).to.equal('running');
    expect(claimed.forwards.map((f) => f.guest_port)).to.include(81);
    expect(w.hv.state('r')).to.equal('running');
    expect(w.hv.state(m.name)).to.equal(undefined);
  });

  it('does nothing without a configured pool', async () => {
    const w = world();
    w.pool.refill();
    await w.pool.settled();
    expect(w.pool.enabled).to.equal(false);
    expect(w.pool.status().members).to.deep.equal([]);
  });
});
