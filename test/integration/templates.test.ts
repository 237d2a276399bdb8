import { expect } from 'chai';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { ndjson } from '../helpers/http.js';

describe('templates, clones and the warm pool (fake hypervisor)', function () {
  this.timeout(60000);

  describe('clones', () => {
    let d: TestDaemon;
    before(async () => {
      d = await startTestDaemon();
      await d.call('POST', '/vms', {
        name: 'tpl',
        persistent: true,
        cpus: 2,
        memory_mb: 256,
        tags: { role: 'template' },
      });
    });
    after(async () => d.stop());

    it('refuses a running template, unknown templates and shape overrides', async () => {
      const r = await d.call('POST', '/vms', { name: 'c0', from: 'tpl' });
      expect(r.status).to.equal(400);
      expect(r.json.error).to.match(/must be a persistent vm that is stopped or suspended/);
      expect((await d.call('POST', '/vms', { from: 'ghost' })).json.error).to.match(/template vm ghost not found/);
      await d.call('POST', '/vms/tpl/suspend');
      expect((await d.call('POST', '/vms', { from: 'tpl', cpus: 4 })).json.error).to.match(
        /cpus cannot be set on a clone/,
      );
      expect((await d.call('POST', '/vms', { from: 'tpl', from_pool: true })).status).to.equal(400);
      expect((await d.call('POST', '/vms/tpl/clone', { from: 'x' })).status).to.equal(400);
    });

    it('clones a suspended template from its snapshot, keeping the template as it was', async () => {
      const r = await d.call('POST', '/vms?stream=1', { name: 'c1', from: 'tpl', tags: { n: '1' } });
      const events = ndjson(r.text);
      expect(events.map((e) => e.phase)).to.deep.equal(['accepted', 'disk', 'boot', 'wait_agent', 'ready']);
      expect(events[2].message).to.match(/restoring from the snapshot of template tpl/);
      const inst = events.at(-1)!.instance as Record<string, unknown>;
      expect(inst).to.include({ name: 'c1', from: 'tpl', cpus: 2, memory_mb: 256, status: 'running' });
      expect(inst.tags).to.deep.equal({ n: '1' });
      expect((await d.call('GET', '/vms/tpl')).json.status).to.equal('suspended');
      const c2 = await d.call('POST', '/vms/tpl/clone', { name: 'c2' });
      expect(c2.status, c2.text).to.equal(201);
      expect(c2.json.from).to.equal('tpl');
      await d.call('POST', '/vms/tpl/restore');
      await d.call('POST', '/vms/tpl/shutdown');
      const cold = ndjson((await d.call('POST', '/vms/tpl/clone?stream=1', { name: 'c3' })).text);
      expect(cold[2].message).to.match(/cold-booting a copy of template tpl/);
      // Deleting the template says what becomes of its clones.
      const rm = await d.call('DELETE', '/vms/tpl');
      expect(rm.status).to.equal(200);
      expect(rm.json.message).to.equal(
        'vm tpl deleted; its clones c1, c2, c3 are kept, with the disk layer they share with it',
      );
      expect((await d.call('GET', '/vms/c1')).json.status).to.equal('running');
    });
  });

  describe('warm pool', () => {
    let d: TestDaemon;
    before(async () => {
      d = await startTestDaemon({ warm_pool: { template: 'base', size: 2 } });
      await d.call('POST', '/vms', { name: 'base', persistent: true });
      await d.call('POST', '/vms/base/suspend');
      // The pool fills when the daemon starts with its template in place.
      await d.restart();
      await d.daemon.poolSettled();
    });
    after(async () => d.stop());

    it('keeps size members ready, hidden from the list', async () => {
      const pool = (await d.call('GET', '/pool')).json;
      expect(pool).to.include({ template: 'base', size: 2, ready: 2, running: false });
      expect(pool.members.map((m: { status: string }) => m.status)).to.deep.equal(['suspended', 'suspended']);
      expect((await d.call('GET', '/vms')).json.map((i: { name: string }) => i.name)).to.deep.equal(['base']);
    });

    it('hands each of 5 concurrent claims a distinct VM, with its tags and forwards, and refills', async () => {
      const members = (await d.call('GET', '/pool')).json.members.map((m: { name: string }) => m.name);
      const results = await Promise.all(
        [1, 2, 3, 4, 5].map((i) =>
          d.call('POST', '/vms', {
            name: `w${i}`,
            from_pool: true,
            tags: { i: String(i) },
            forwards: [{ guest_port: 80 }],
          }),
        ),
      );
      for (const r of results) expect(r.status, r.text).to.equal(201);
      const names = results.map((r) => r.json.name);
      expect(new Set(names).size).to.equal(5);
      for (const [i, r] of results.entries()) {
        expect(r.json.tags).to.deep.equal({ i: String(i + 1) });
        expect(r.json.forwards[0]).to.include({ guest_port: 80, kind: 'boot' });
        expect(r.json.from).to.equal('base');
      }
      const activity = (await d.call('GET', '/activity')).json.events;
      const claimedFrom = activity
        .filter((e: { message?: string }) => /^claimed /.test(e.message ?? ''))
        .map((e: { message: string }) => e.message.slice(8));
      expect(claimedFrom.sort()).to.deep.equal([...members].sort());
      await d.daemon.poolSettled();
      const after = (await d.call('GET', '/pool')).json;
      expect(after.ready).to.equal(2);
      expect(after.members.map((m: { name: string }) => m.name)).not.to.include.members(names);
    });

    it('refuses from_pool without a configured pool', async () => {
      const plain = await startTestDaemon();
      try {
        expect((await plain.call('POST', '/vms', { from_pool: true })).json.error).to.match(/no warm_pool/);
      } finally {
        await plain.stop();
      }
    });
  });

  describe('warm pool of running members (fake_agent)', () => {
    let d: TestDaemon;
    before(async () => {
      d = await startTestDaemon({ fake_agent: true, warm_pool: { template: 'rt', size: 2, running: true } });
      await d.call('POST', '/vms', { name: 'rt', persistent: true });
      await d.call('POST', '/vms/rt/shutdown');
      await d.restart();
      await d.daemon.poolSettled();
    });
    after(async () => d.stop());

    it('keeps members running and hands them out renamed, with their agent following', async () => {
      const pool = (await d.call('GET', '/pool')).json;
      expect(pool).to.include({ running: true, ready: 2 });
      expect(pool.members.map((m: { status: string }) => m.status)).to.deep.equal(['running', 'running']);
      const results = await Promise.all(
        [1, 2, 3].map((i) =>
          d.call('POST', '/vms', { name: `r${i}`, from_pool: true, forwards: [{ guest_port: 9999 }] }),
        ),
      );
      for (const r of results) expect(r.status, r.text).to.equal(201);
      expect(new Set(results.map((r) => r.json.name)).size).to.equal(3);
      for (const r of results) {
        expect(r.json.forwards.find((f: { guest_port: number }) => f.guest_port === 9999)).to.include({ kind: 'boot' });
        const h = await d.call('GET', `/vms/${r.json.name}/agent/health`);
        expect(h.json.hostname).to.equal(r.json.name);
      }
      await d.daemon.poolSettled();
      expect((await d.call('GET', '/pool')).json.ready).to.equal(2);
    });
  });
});
