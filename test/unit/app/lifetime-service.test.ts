import { expect } from 'chai';
import { LifetimeService } from '../../../src/app/lifetime-service.js';
import { parseCreateRequest } from '../../../src/domain/create-request.js';
import { InvalidArgumentError } from '../../../src/domain/errors.js';
import { parseLifetimeChange, parseTtl } from '../../../src/domain/lifetime.js';
import { world } from '../../fakes/world.js';
import { waitUntil } from '../../helpers/wait.js';

const until = (what: string, ok: () => boolean, ms = 5000) => waitUntil(what, ok, { ms, every: 20 });

describe("a VM's lifetime (ttl)", function () {
  this.timeout(10_000);
  it('takes whole seconds or a duration from 1 s to 24 days, and says what it wants', () => {
    expect(parseTtl(90)).to.equal(90_000);
    expect(parseTtl('1h30m')).to.equal(5_400_000);
    for (const bad of [0, -5, 1.5, '500ms', '25d', 2_073_601, '', 'soon', {}, true])
      expect(() => parseTtl(bad), String(bad)).to.throw(
        InvalidArgumentError,
        /^ttl must be whole seconds or a duration/,
      );
    expect(parseCreateRequest({ ttl: '10m', on_expire: 'suspend' })).to.include({
      ttl_ms: 600_000,
      on_expire: 'suspend',
    });
    expect(() => parseCreateRequest({ on_expire: 'suspend' })).to.throw(InvalidArgumentError, 'on_expire needs a ttl');
    expect(() => parseCreateRequest({ ttl: '1m', on_expire: 'stop' })).to.throw(/on_expire must be delete or suspend/);
    expect(parseLifetimeChange({ ttl: null })).to.deep.equal({ ttl_ms: null });
    expect(() => parseLifetimeChange({})).to.throw(/ttl is required/);
    expect(() => parseLifetimeChange({ ttl: 5, until: 1 })).to.throw(/unknown field "until"/);
  });

  it('deletes a VM at the end of its ttl, and a VM whose ttl was taken away lives on', async () => {
    const w = world();
    const lifetimes = w.container.get(LifetimeService);
    const t0 = Date.now();
    const a = await (await w.creates.create({ name: 'a', ttl: 1 }, {})).done;
    expect(Date.parse(a.expires_at!) - t0).to.be.within(900, 1500);
    expect(a.on_expire).to.equal('delete');
    await (
      await w.creates.create({ name: 'b', ttl: 1, persistent: true }, {})
    ).done;
    const kept = await lifetimes.set('b', { ttl_ms: null });
    expect(kept).to.not.have.property('expires_at');
    await until('a deleted', () => !w.vms.find('a'));
    expect(w.activity.events.map((e) => `${e.action} ${e.target}`)).to.include.members(['expire a', 'delete a']);
    await new Promise((r) => setTimeout(r, 1200));
    expect(w.vms.get('b').status).to.equal('running');
    lifetimes.stop();
  });

  it('suspends at the end when asked to, and the time is then spent: a restored VM runs on', async () => {
    const w = world();
    const lifetimes = w.container.get(LifetimeService);
    await (
      await w.creates.create({ name: 's', persistent: true, ttl: 60, on_expire: 'suspend' }, {})
    ).done;
    // Moved to a second from now: the timer follows.
    const moved = await lifetimes.set('s', { ttl_ms: 1000 });
    expect(moved.on_expire, 'kept from before').to.equal('suspend');
    await until('s suspended', () => w.vms.get('s').status === 'suspended' && !w.vms.get('s').expires_at);
    await w.svc.restore('s');
    await new Promise((r) => setTimeout(r, 300));
    expect(w.vms.get('s').status).to.equal('running');
    lifetimes.stop();
  });

  it('keeps the end in the record: timers armed at start act on what ended while the daemon was away', async () => {
    const w = world();
    const lifetimes = w.container.get(LifetimeService);
    await (
      await w.creates.create({ name: 'late', ttl: 3600 }, {})
    ).done;
    lifetimes.stop();
    const rec = w.vms.get('late');
    rec.expires_at = new Date(Date.now() - 1000).toISOString();
    await w.vms.save(rec);
    expect(w.store.records.get('late')!.expires_at).to.equal(rec.expires_at);
    lifetimes.start();
    await until('late deleted', () => !w.vms.find('late'));
    lifetimes.stop();
  });
});
