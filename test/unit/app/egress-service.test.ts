import { expect } from 'chai';
import type { EgressEvent } from '../../../src/domain/egress.js';
import { InvalidArgumentError, NotFoundError } from '../../../src/domain/errors.js';
import { world } from '../../fakes/world.js';

const deny = { default: 'deny' as const, allow: ['host:8080'], deny: [] };
const entry = (vm: string, e: Partial<EgressEvent> = {}): EgressEvent => ({
  t: new Date().toISOString(),
  vm,
  event: 'deny',
  proto: 'tcp',
  decision: 'deny',
  rule: 'default',
  addr: '1.2.3.4',
  port: 80,
  ...e,
});

describe('app/EgressService', () => {
  it("gives a VM the config's policy, or its own, from its first launch; clones and pool members take their template's", async () => {
    const w = world({ egress: { default: 'allow', deny: ['evil.com'] }, warm_pool: { template: 'tpl', size: 1 } });
    await (
      await w.creates.create({ name: 'plain' }, {})
    ).done;
    expect(w.vms.get('plain').egress).to.deep.equal({ default: 'allow', allow: [], deny: ['evil.com'] });
    expect(w.hv.launchedWith('plain')!.egress).to.deep.equal(w.vms.get('plain').egress);
    await (
      await w.creates.create({ name: 'tpl', persistent: true, egress: deny }, {})
    ).done;
    expect(w.hv.launchedWith('tpl')!.egress).to.deep.equal(deny);
    await w.svc.suspend('tpl');
    await (
      await w.creates.create({ name: 'c1', from: 'tpl' }, {})
    ).done;
    expect(w.hv.launchedWith('c1')!.egress, "a clone keeps its template's policy").to.deep.equal(deny);
    const own = { default: 'allow' as const, allow: [], deny: [] };
    await (
      await w.creates.create({ name: 'c2', from: 'tpl', egress: own }, {})
    ).done;
    expect(w.vms.get('c2').egress, 'unless it gives its own').to.deep.equal(own);
    w.pool.refill();
    await w.pool.settled();
    await (
      await w.creates.create({ name: 'p1', from_pool: true }, {})
    ).done;
    expect(w.vms.get('p1').egress).to.deep.equal(deny);
    w.pool.stop();
    await w.svc.suspend('tpl').catch(() => undefined);
    expect(await w.creates.create({ egress: { default: 'sometimes' } }, {}).catch((e) => e)).to.be.instanceOf(
      InvalidArgumentError,
    );
  });

  it('replaces a policy live on a running VM, keeps it across suspend and restore, and only records it on a stopped one', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'a', persistent: true }, {})
    ).done;
    expect(await w.egress.put('a', deny)).to.deep.equal(deny);
    expect(w.network.policies.get('a'), 'in force at once').to.deep.equal(deny);
    expect(w.store.records.get('a')!.egress, 'and kept').to.deep.equal(deny);
    await w.svc.suspend('a');
    await w.svc.restore('a');
    expect(w.hv.launchedWith('a')!.egress).to.deep.equal(deny);
    await w.svc.shutdown('a');
    w.network.policies.clear();
    await w.egress.put('a', { default: 'allow' });
    expect(w.network.policies.has('a'), 'a stopped VM has no network to tell').to.equal(false);
    await w.svc.start('a');
    expect(w.hv.launchedWith('a')!.egress).to.deep.equal({ default: 'allow', allow: [], deny: [] });
    expect(await w.egress.put('a', { default: 'deny', allow: ['not a rule'] }).catch((e) => e)).to.be.instanceOf(
      InvalidArgumentError,
    );
    expect(w.vms.get('a').egress.default, 'a bad policy changes nothing').to.equal('allow');
    expect(await w.egress.put('nope', deny).catch((e) => e)).to.be.instanceOf(NotFoundError);
    expect(
      w.activity.events.filter((e) => e.action === 'egress').map((e) => e.status),
      'a refused body changed nothing, so is no activity',
    ).to.deep.equal(['ok', 'ok']);
  });

  it('sets the policy again on a VM re-attached after a daemon restart', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'a', persistent: true, egress: deny }, {})
    ).done;
    const w2 = world({}, w.store, w.hv);
    await w2.recovery.init();
    expect(w2.network.policies.get('a')).to.deep.equal(deny);
  });

  it("counts every decision, notes refusals in the activity log at most once a second per VM, and follows one VM's log", async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'a' }, {})
    ).done;
    w.egress.start();
    const ac = new AbortController();
    const followed: EgressEvent[] = [];
    const reading = (async () => {
      for await (const e of w.egress.follow('a', ac.signal)) followed.push(e);
    })();
    w.network.emit(entry('a', { event: 'open', decision: 'allow' }));
    for (let i = 0; i < 5; i++) w.network.emit(entry('a', { port: 1000 + i }));
    w.network.emit(entry('b'));
    w.network.emit(entry('a', { event: 'dns', proto: 'dns', decision: 'deny', repeats: 4 }));
    w.network.emit(entry('a', { event: 'close', decision: 'allow' }));
    await new Promise((r) => setTimeout(r, 10));
    ac.abort();
    await reading;
    expect(followed.map((e) => e.event)).to.deep.equal([
      'open',
      'deny',
      'deny',
      'deny',
      'deny',
      'deny',
      'dns',
      'close',
    ]);
    const a = w.metrics.egress.filter((e) => e.vm === 'a');
    expect(
      a.filter((e) => !e.dns).reduce((n, e) => n + e.n, 0),
      'connections: the open and five refusals',
    ).to.equal(6);
    expect(
      a.filter((e) => e.dns).map((e) => e.n),
      'the folded repeats count',
    ).to.deep.equal([5]);
    const notes = w.activity.events.filter((e) => e.action === 'egress-deny');
    expect(notes.map((e) => e.target)).to.deep.equal(['a', 'b']);
    expect(notes[0].message).to.equal('tcp 1.2.3.4:1000 refused by default');
    expect(await w.egress.log('a', { limit: 3 })).to.have.length(3);
    await w.svc.delete('a');
    expect(
      w.metrics.egress.some((e) => e.vm === 'a'),
      "a deleted VM's series go",
    ).to.equal(false);
  });

  it('follows nothing for a caller whose signal aborted before the follow began, and stops watching', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'a' }, {})
    ).done;
    const watchers = () => (w.network as unknown as { listeners: Set<unknown> }).listeners.size;
    const before = watchers();
    const ac = new AbortController();
    ac.abort();
    const followed: EgressEvent[] = [];
    const reading = (async () => {
      for await (const e of w.egress.follow('a', ac.signal)) followed.push(e);
    })();
    w.network.emit(entry('a'));
    const ended = await Promise.race([reading.then(() => true), new Promise((r) => setTimeout(() => r(false), 500))]);
    expect(ended, 'the follow ended at once').to.equal(true);
    expect(followed).to.deep.equal([]);
    expect(watchers(), 'its watch is gone').to.equal(before);
  });
});
