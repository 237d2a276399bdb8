import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { WebSocket } from 'ws';
import { call, ndjson } from '../helpers/http.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import type { InMemoryHypervisor } from '../../src/adapters/hypervisor/fake/in-memory-hypervisor.js';
import { Hypervisor } from '../../src/ports/hypervisor.js';

describe('daemon over HTTP (fake hypervisor)', function () {
  this.timeout(20000);
  let d: TestDaemon;
  beforeEach(async () => {
    d = await startTestDaemon();
  });
  afterEach(async () => {
    await d.stop();
  });

  describe('listeners and auth', () => {
    it('serves the same API on the Unix socket (0600) and on TCP', async () => {
      expect(statSync(d.config.socket).mode & 0o777).to.equal(0o600);
      const a = await call(d.unix, 'GET', '/info');
      const b = await call(d.tcp, 'GET', '/info');
      expect(a.status).to.equal(200);
      expect(b.json).to.deep.equal(a.json);
      expect(a.json).to.include({ name: 'svc', api_version: '0.2.2', hypervisor: 'fake' });
    });

    it('answers /healthz without a token and 401 elsewhere, with WWW-Authenticate', async () => {
      expect((await call({ socketPath: d.config.socket }, 'GET', '/healthz')).json).to.deep.equal({ status: 'ok' });
      for (const [method, path] of [
        ['GET', '/info'],
        ['GET', '/vms'],
        ['POST', '/vms'],
        ['GET', '/metrics'],
        ['GET', '/openapi.yaml'],
        ['DELETE', '/vms/x'],
        ['GET', '/nope'],
      ]) {
        const r = await call({ port: d.tcp.port }, method, path);
        expect(r.status, `${method} ${path}`).to.equal(401);
        expect(r.headers['www-authenticate']).to.match(/^Bearer/);
        expect(r.json.error).to.be.a('string');
      }
      const wrong = await call({ port: d.tcp.port, token: 'test-tokeN' }, 'GET', '/vms');
      expect(wrong.status).to.equal(401);
      const basic = await call({ port: d.tcp.port }, 'GET', '/vms', undefined, { authorization: 'Basic dGVzdA==' });
      expect(basic.status).to.equal(401);
      // A WebSocket upgrade is refused on its raw socket the same way: status, challenge and {error}.
      const ws = new WebSocket(`ws://127.0.0.1:${d.tcp.port}/vms/x/shell`);
      const refused = await new Promise<{ status?: number; headers: Record<string, unknown>; body: string }>(
        (resolve, reject) => {
          ws.on('open', () => reject(new Error('the upgrade was taken without a token')));
          ws.on('error', () => undefined);
          ws.on('unexpected-response', (_req, res) => {
            let body = '';
            res.on('data', (c: Buffer) => (body += c.toString()));
            res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
          });
        },
      );
      expect(refused.status).to.equal(401);
      expect(refused.headers['www-authenticate']).to.match(/^Bearer/);
      expect(JSON.parse(refused.body)).to.include({ code: 'unauthenticated' });
    });

    it('needs no token when none is configured', async () => {
      const open = await startTestDaemon({ api_token: '' });
      try {
        expect((await call({ port: open.tcp.port }, 'GET', '/vms')).status).to.equal(200);
      } finally {
        await open.stop();
      }
    });

    it('refuses to start on a socket where another daemon is live, and replaces a stale one', async () => {
      const err = await startTestDaemon({ data_dir: d.config.data_dir }, {}, d.dir).catch((e) => e);
      expect(err.message).to.match(/another svcd is already serving/);
      await d.daemon.stop();
      // The socket file is gone or stale now; a new daemon takes it over.
      await d.restart();
      expect((await d.call('GET', '/healthz')).status).to.equal(200);
    });
  });

  describe('create', () => {
    it('blocks until ready and answers 201 with the Instance', async () => {
      const r = await d.call('POST', '/vms', {
        name: 'web',
        cpus: 2,
        memory_mb: 256,
        tags: { a: 'b' },
        userdata: 'echo hi',
        forwards: [{ guest_port: 80 }],
      });
      expect(r.status).to.equal(201);
      expect(r.json).to.include({
        name: 'web',
        status: 'running',
        persistent: false,
        cpus: 2,
        memory_mb: 256,
        disk_gb: 4,
        image: 'debian',
      });
      expect(r.json).not.to.have.property('userdata');
      expect(r.json.forwards).to.have.length(1);
      expect(r.json.forwards[0]).to.include({ guest_port: 80, proto: 'tcp', kind: 'boot' });
      expect(r.json.forwards[0].host_port).to.be.above(1023);
      const list = await d.call('GET', '/vms');
      expect(list.json.map((i: { name: string }) => i.name)).to.deep.equal(['web']);
      expect((await d.call('GET', '/vms/web')).json).to.deep.equal(r.json);
    });

    it('accepts an empty body', async () => {
      const r = await d.call('POST', '/vms');
      expect(r.status).to.equal(201);
      expect(r.json.name).to.equal('vm-1');
    });

    it('streams NDJSON progress with stream=1 or Accept, ending in ready', async () => {
      const r = await d.call('POST', '/vms?stream=1', { name: 's1' });
      expect(r.status).to.equal(200);
      expect(r.headers['content-type']).to.match(/application\/x-ndjson/);
      const events = ndjson(r.text);
      expect(events.map((e) => e.phase)).to.deep.equal(['accepted', 'disk', 'boot', 'wait_agent', 'ready']);
      for (const e of events) expect(e).to.include.keys('phase', 'message', 'name', 't', 'elapsed_ms');
      expect((events.at(-1)!.instance as { status: string }).status).to.equal('running');
      const r2 = await d.call(
        'POST',
        '/vms?wait=ssh',
        { name: 's2', image: 'ssh-only' },
        { accept: 'application/x-ndjson' },
      );
      expect(ndjson(r2.text).map((e) => e.phase)).to.include('wait_ssh');
    });

    it('ends a failed streamed create with an error event (200) and leaves nothing behind', async () => {
      const r = await d.call('POST', '/vms?stream=1', { name: 'bad', image: 'fail-boot' });
      expect(r.status).to.equal(200);
      const last = ndjson(r.text).at(-1)!;
      expect(last.phase).to.equal('error');
      expect(last.error).to.match(/boot failure/);
      expect((await d.call('GET', '/vms/bad')).status).to.equal(404);
      expect(existsSync(join(d.config.data_dir, 'vms', 'bad'))).to.equal(false);
      const metrics = (await d.call('GET', '/metrics')).text;
      expect(metrics).to.match(/^svc_create_errors_total 1$/m);
    });

    it('answers 500 for a failed create and 504 when the deadline passes', async () => {
      const r = await d.call('POST', '/vms', { name: 'bad', image: 'fail-provision' });
      expect(r.status).to.equal(500);
      expect(r.json.error).to.match(/disk failure/);
      const t = await d.call('POST', '/vms?timeout=300ms', { name: 'slow', image: 'never-ready' });
      expect(t.status).to.equal(504);
      expect(t.json.error).to.match(/timed out/);
      expect((await d.call('GET', '/vms')).json).to.deep.equal([]);
      expect(readdirSync(join(d.config.data_dir, 'vms'))).to.deep.equal([]);
    });

    it('refuses bad creates with 400, 409, 413, 429 and changes nothing', async () => {
      await d.call('POST', '/vms', { name: 'web' });
      const cases: [string, unknown, number, RegExp, Record<string, string>?][] = [
        ['/vms?wait=false', {}, 400, /not supported/],
        ['/vms?wait=0', {}, 400, /not supported/],
        ['/vms?timeout=never', {}, 400, /invalid duration/],
        ['/vms', { name: 'web' }, 409, /already exists/],
        ['/vms', { name: 'x', extra: 1 }, 400, /unknown field "extra"/],
        ['/vms', { name: 'x', cpus: 'many' }, 400, /cpus must be an integer/],
        ['/vms', { name: 'Bad_Name' }, 400, /invalid vm name/],
        ['/vms', '{"name": "x",', 400, /invalid JSON/],
        ['/vms', { name: 'x', image: 'missing' }, 400, /unknown image/],
        ['/vms', { name: 'x', userdata: 'a'.repeat(1024 * 1024 + 10) }, 413, /larger than/],
        ['/vms', 'name=x', 400, /application\/json/, { 'content-type': 'text/plain' }],
      ];
      for (const [path, body, status, re, headers] of cases) {
        const r = await d.call('POST', path, body, headers);
        expect(r.status, `${path} ${String(body).slice(0, 40)}`).to.equal(status);
        expect(r.json.error).to.match(re);
      }
      expect((await d.call('GET', '/vms')).json.map((i: { name: string }) => i.name)).to.deep.equal(['web']);
      const capped = await startTestDaemon({ max_vms: 1 });
      try {
        expect((await capped.call('POST', '/vms', { name: 'a' })).status).to.equal(201);
        const r = await capped.call('POST', '/vms', { name: 'b' });
        expect(r.status).to.equal(429);
        expect(r.json.error).to.match(/max_vms/);
      } finally {
        await capped.stop();
      }
    });
  });

  describe('lifecycle', () => {
    it('runs every allowed transition and refuses the others with 400', async () => {
      await d.call('POST', '/vms', { name: 'p', persistent: true });
      const step = async (verb: string, status: number, re?: RegExp) => {
        const r = await d.call('POST', `/vms/p/${verb}`);
        expect(r.status, `${verb}: ${r.text}`).to.equal(status);
        if (re) expect(r.json.error ?? r.json.message).to.match(re);
        return r;
      };
      await step('resume', 400, /is already running|is running/);
      await step('restore', 400, /use pause, suspend or shutdown/);
      expect((await step('pause', 200)).json).to.deep.equal({ message: 'vm p paused', name: 'p' });
      await step('pause', 400, /already paused; use resume/);
      await step('start', 400, /use resume/);
      await step('resume', 200);
      const s = await step('suspend', 200);
      expect(s.json.name).to.equal('p');
      const got = (await d.call('GET', '/vms/p')).json;
      expect(got.status).to.equal('suspended');
      expect(got.suspended_at).to.be.a('string');
      await step('start', 400, /use restore/);
      await step('pause', 400, /use restore/);
      const restored = await step('restore', 200);
      expect(restored.json.status).to.equal('running');
      expect(restored.json).not.to.have.property('suspended_at');
      await step('shutdown', 200);
      expect((await d.call('GET', '/vms/p')).json.status).to.equal('stopped');
      await step('shutdown', 200, /already stopped/);
      await step('suspend', 400, /use start/);
      expect((await step('start', 200)).json.status).to.equal('running');
      const del = await d.call('DELETE', '/vms/p');
      expect(del.json).to.deep.equal({ message: 'vm p deleted', name: 'p' });
      expect((await d.call('GET', '/vms/p')).status).to.equal(404);
      expect((await d.call('DELETE', '/vms/p')).status).to.equal(404);
    });

    it("edits a stopped vm's shape for its next boot, and refuses what cannot change", async () => {
      const hv = d.daemon.container.get<InMemoryHypervisor>(Hypervisor);
      await d.call('POST', '/vms', { name: 'ed', persistent: true, cpus: 1, memory_mb: 256, disk_gb: 2 });
      const edit = (body: unknown, name = 'ed') => d.call('PATCH', `/vms/${name}`, body);
      const refused = async (body: unknown, status: number, re: RegExp, name = 'ed') => {
        const r = await edit(body, name);
        expect(r.status, r.text).to.equal(status);
        expect(r.json.error).to.match(re);
      };
      await refused({ cpus: 2 }, 400, /is running: a VM's shape changes while it is stopped \(svc stop ed/);
      await d.call('POST', '/vms/ed/suspend');
      await refused({ cpus: 2 }, 400, /is suspended: its saved state holds the machine/);
      await d.call('POST', '/vms/ed/restore');
      await d.call('POST', '/vms/ed/shutdown');
      await refused({}, 400, /nothing to change/);
      await refused({ cpus: 2, name: 'x' }, 400, /unknown field name/);
      await refused({ cpus: 0 }, 400, /cpus must be an integer from 1 to 64/);
      await refused({ memory_mb: 65 }, 400, /memory_mb 65 is too little for image \S+: it boots in at least/);
      await refused({ disk_gb: 1 }, 400, /smaller than the disk of vm ed \(2 GB\): a disk only grows/);
      await refused([1], 400, /JSON object/);
      await refused({ cpus: 2 }, 404, /vm ghost not found/, 'ghost');
      // A disk that cannot grow leaves the record as it was.
      hv.failNext('growDisk', 'injected: no room for the disk');
      expect((await edit({ cpus: 2, disk_gb: 3 })).status).to.equal(500);
      expect((await d.call('GET', '/vms/ed')).json).to.include({ cpus: 1, disk_gb: 2 });

      const ok = await edit({ cpus: 3, memory_mb: 512, disk_gb: 5 });
      expect(ok.status, ok.text).to.equal(200);
      expect(ok.json).to.include({ name: 'ed', status: 'stopped', cpus: 3, memory_mb: 512, disk_gb: 5 });
      expect(hv.diskGb('ed')).to.equal(5);
      // Only what is given changes; the record is kept across a restart.
      expect((await edit({ cpus: 2 })).json).to.include({ cpus: 2, memory_mb: 512, disk_gb: 5 });
      await d.call('POST', '/vms', { name: 'er', persistent: true });
      await d.restart();
      expect((await d.call('GET', '/vms/ed')).json).to.include({ cpus: 2, memory_mb: 512, disk_gb: 5 });
      // A persistent VM in error (here: its fake process did not outlive the daemon) is edited to start again.
      expect((await d.call('GET', '/vms/er')).json.status).to.equal('error');
      expect((await edit({ memory_mb: 384 }, 'er')).json).to.include({ status: 'error', memory_mb: 384 });
      // A disk grows after a restart too (the restarted daemon's hypervisor has not launched the VM yet).
      expect((await edit({ disk_gb: 6 })).json).to.include({ disk_gb: 6 });
      expect(d.daemon.container.get<InMemoryHypervisor>(Hypervisor).diskGb('ed')).to.equal(6);
      expect((await d.call('POST', '/vms/ed/start')).status).to.equal(200);
      const launched = d.daemon.container.get<InMemoryHypervisor>(Hypervisor).launchedWith('ed')!;
      expect(launched).to.include({ cpus: 2, memory_mb: 512, disk_gb: 6 });
      const acts = (await d.call('GET', '/activity?limit=50')).json.events as {
        action: string;
        target: string;
        status: string;
      }[];
      expect(acts.filter((a) => a.action === 'edit' && a.target === 'ed').map((a) => a.status)).to.include.members([
        'ok',
        'error',
      ]);
    });

    it('takes named snapshots of a vm running or stopped, reverts to them in place, and forgets them', async () => {
      const hv = d.daemon.container.get<InMemoryHypervisor>(Hypervisor);
      await d.call('POST', '/vms', { name: 'sn', persistent: true, cpus: 1, memory_mb: 256, disk_gb: 2 });
      const take = (body?: unknown, name = 'sn') => d.call('POST', `/vms/${name}/snapshots`, body);
      const refused = async (r: Awaited<ReturnType<typeof take>>, status: number, re: RegExp) => {
        expect(r.status, r.text).to.equal(status);
        expect(r.json.error).to.match(re);
      };
      // Running: its memory goes in, through a capture that is dropped after.
      const s1 = await take({ name: 'before-tests', description: 'clean tree' });
      expect(s1.status, s1.text).to.equal(201);
      expect(s1.json).to.include({
        name: 'before-tests',
        memory: true,
        taken_from: 'running',
        cpus: 1,
        memory_mb: 256,
        disk_gb: 2,
        description: 'clean tree',
      });
      expect(hv.heldCaptures('sn')).to.deep.equal([]);
      await refused(await take({ name: 'before-tests' }), 409, /vm sn has a snapshot before-tests already/);
      await refused(await take({ name: 'Bad/Name' }), 400, /invalid snapshot name/);
      await refused(await take({ name: 'x', keep: true }), 400, /unknown field keep/);
      await refused(await take({}, 'ghost'), 404, /vm ghost not found/);
      await refused(await d.call('GET', '/vms/sn/snapshots/nope'), 404, /vm sn has no snapshot nope/);
      await refused(await d.call('POST', '/vms/sn/snapshots/nope/revert'), 404, /vm sn has no snapshot nope/);

      // Stopped: its disk only, named snap-N; the VM is edited after it.
      await d.call('POST', '/vms/sn/shutdown');
      const s2 = await take();
      expect(s2.json).to.include({ name: 'snap-1', memory: false, taken_from: 'stopped' });
      expect((await d.call('PATCH', '/vms/sn', { cpus: 2, memory_mb: 512, disk_gb: 4 })).status).to.equal(200);
      expect(hv.diskGb('sn')).to.equal(4);
      const list = await d.call('GET', '/vms/sn/snapshots');
      expect(list.json.map((s: { name: string }) => s.name)).to.deep.equal(['before-tests', 'snap-1']);
      expect((await d.call('GET', '/vms/sn/snapshots/snap-1')).json).to.deep.equal(s2.json);
      // Snapshots are not part of the Instance, and a clone of the VM has none of its own.
      expect((await d.call('GET', '/vms/sn')).json).to.not.have.property('snapshots');
      await d.call('POST', '/vms/sn/clone', { name: 'sn-clone' });
      expect((await d.call('GET', '/vms/sn-clone/snapshots')).json).to.deep.equal([]);

      // A revert to the disk-only snapshot leaves it stopped, with the shape it had then.
      await d.call('POST', '/vms/sn/start');
      const r1 = await d.call('POST', '/vms/sn/snapshots/snap-1/revert');
      expect(r1.status, r1.text).to.equal(200);
      expect(r1.json).to.include({ status: 'stopped', cpus: 1, memory_mb: 256, disk_gb: 2 });
      expect(hv.diskGb('sn')).to.equal(2);
      expect(hv.reverted.get('sn')).to.equal('snap-1');
      // A revert to the running snapshot resumes its guest from the saved state.
      const r2 = await d.call('POST', '/vms/sn/snapshots/before-tests/revert');
      expect(r2.status, r2.text).to.equal(200);
      expect(r2.json).to.include({ status: 'running', cpus: 1 });
      expect((await d.call('GET', '/vms/sn/logs')).text).to.match(/\[fake\] sn restored from snapshot\n$/);
      // Its saved guest that does not load: the VM cold-boots and the answer says so.
      hv.failNext('restore');
      const r3 = await d.call('POST', '/vms/sn/snapshots/before-tests/revert');
      expect(r3.json).to.include({ status: 'running' });
      expect(r3.json.warning).to.match(/^cold-booted, the snapshot's processes did not come back/);
      // A revert that fails leaves a stopped VM that starts.
      hv.failNext('revert', 'injected: no room');
      await refused(await d.call('POST', '/vms/sn/snapshots/snap-1/revert'), 500, /injected: no room/);
      expect((await d.call('GET', '/vms/sn')).json.status).to.equal('stopped');
      expect((await d.call('POST', '/vms/sn/start')).status).to.equal(200);

      // Kept across a daemon restart (and reverted to after it); deleted one by one, and all of them with the VM.
      await d.restart();
      expect((await d.call('GET', '/vms/sn/snapshots')).json).to.have.length(2);
      expect((await d.call('POST', '/vms/sn/snapshots/before-tests/revert')).json).to.include({ status: 'running' });
      const del = await d.call('DELETE', '/vms/sn/snapshots/snap-1');
      expect(del.json).to.deep.equal({ message: 'snapshot snap-1 of vm sn deleted', name: 'sn', snapshot: 'snap-1' });
      expect((await d.call('DELETE', '/vms/sn/snapshots/snap-1')).status).to.equal(404);
      const hv2 = d.daemon.container.get<InMemoryHypervisor>(Hypervisor);
      expect(hv2.keptSnapshots(join(d.config.data_dir, 'vms', 'sn'))).to.deep.equal(['before-tests']);
      const acts = (await d.call('GET', '/activity?limit=100')).json.events as { action: string; status: string }[];
      for (const a of ['snapshot', 'revert', 'snapshot.delete'])
        expect(
          acts.some((e) => e.action === a && e.status === 'ok'),
          a,
        ).to.equal(true);
      await d.call('DELETE', '/vms/sn');
      expect(hv2.keptSnapshots(join(d.config.data_dir, 'vms', 'sn'))).to.deep.equal([]);
    });

    it("creates a vm from a named snapshot of another, whatever that one does now, with the snapshot's shape", async () => {
      const hv = d.daemon.container.get<InMemoryHypervisor>(Hypervisor);
      await d.call('POST', '/vms', { name: 'base', cpus: 1, memory_mb: 256 }); // ephemeral, running
      expect((await d.call('POST', '/vms/base/snapshots', { name: 'warm' })).status).to.equal(201);
      const made = await d.call('POST', '/vms', { name: 'kid', from: 'base', snapshot: 'warm', tags: { t: '1' } });
      expect(made.status, made.text).to.equal(201);
      expect(made.json).to.include({ name: 'kid', from: 'base', status: 'running', cpus: 1, memory_mb: 256 });
      expect(made.json.tags).to.deep.equal({ t: '1' });
      expect((await d.call('GET', '/vms/kid/logs')).text).to.match(/\[fake\] kid restored from snapshot\n$/);
      // A snapshot without memory: the new VM boots; its shape is the snapshot's, not the VM's now.
      await d.call('POST', '/vms', { name: 'base2', persistent: true, cpus: 1, memory_mb: 256 });
      await d.call('POST', '/vms/base2/shutdown');
      await d.call('POST', '/vms/base2/snapshots', { name: 'cold' });
      await d.call('PATCH', '/vms/base2', { cpus: 2, memory_mb: 512 });
      await d.call('POST', '/vms/base2/start');
      const booted = await d.call('POST', '/vms/base2/clone', { name: 'kid2', snapshot: 'cold' });
      expect(booted.status, booted.text).to.equal(201);
      expect(booted.json).to.include({ from: 'base2', status: 'running', cpus: 1, memory_mb: 256 });
      expect(hv.launchedWith('kid2')).to.include({ cpus: 1, memory_mb: 256 });
      expect((await d.call('GET', '/vms/kid2/logs')).text).to.match(/\[fake\] kid2 booted\n$/);
      // Refusals: before anything is made.
      const refused = async (body: unknown, status: number, re: RegExp) => {
        const r = await d.call('POST', '/vms', body);
        expect(r.status, r.text).to.equal(status);
        expect(r.json.error).to.match(re);
      };
      await refused({ name: 'kid3', from: 'base', snapshot: 'nope' }, 404, /vm base has no snapshot nope/);
      await refused({ name: 'kid3', from: 'ghost', snapshot: 'warm' }, 404, /vm ghost not found/);
      await refused({ name: 'kid3', from: 'base', snapshot: 'warm', memory_mb: 512 }, 400, /cannot be set on a clone/);
      expect((await d.call('GET', '/vms/kid3')).status).to.equal(404);
      // The new VM is its own: the source and its snapshot can go.
      await d.call('DELETE', '/vms/base');
      expect((await d.call('POST', '/vms/kid/exec?cmd=true')).status).to.not.equal(404);
      expect((await d.call('GET', '/vms/kid')).json.status).to.equal('running');
    });

    it('keeps at most 32 snapshots of a vm', async () => {
      await d.call('POST', '/vms', { name: 'many', persistent: true });
      await d.call('POST', '/vms/many/shutdown');
      for (let i = 0; i < 32; i++) expect((await d.call('POST', '/vms/many/snapshots')).status).to.equal(201);
      const r = await d.call('POST', '/vms/many/snapshots');
      expect(r.status).to.equal(429);
      expect(r.json.error).to.match(/vm many has 32 snapshots, the most a vm keeps: delete one first/);
      expect((await d.call('GET', '/vms/many/snapshots')).json.at(-1).name).to.equal('snap-32');
    });

    it('removes an ephemeral vm on shutdown and refuses to suspend it', async () => {
      await d.call('POST', '/vms', { name: 'e' });
      const s = await d.call('POST', '/vms/e/suspend');
      expect(s.status).to.equal(400);
      expect(s.json.error).to.match(/ephemeral/);
      expect((await d.call('POST', '/vms/e/shutdown')).json.message).to.match(/removed/);
      expect((await d.call('GET', '/vms/e')).status).to.equal(404);
    });

    it('answers 404 for verbs on missing vms and 400 for bad names, including path tricks', async () => {
      for (const verb of ['start', 'shutdown', 'pause', 'resume', 'suspend', 'restore']) {
        expect((await d.call('POST', `/vms/ghost/${verb}`)).status).to.equal(404);
      }
      for (const path of ['/vms/..%2Fetc', '/vms/a%2Fb', '/vms/UPPER', '/vms/%2e%2e']) {
        const r = await d.call('GET', path);
        expect(r.status, path).to.equal(400);
        expect(r.json.error).to.match(/invalid vm name/);
      }
    });

    it('keeps persistent vms across a daemon restart and cleans up ephemeral ones', async () => {
      await d.call('POST', '/vms', { name: 'keep', persistent: true });
      await d.call('POST', '/vms/keep/shutdown');
      await d.call('POST', '/vms', { name: 'run', persistent: true });
      await d.call('POST', '/vms', { name: 'eph' });
      await d.restart();
      const list = (await d.call('GET', '/vms')).json as { name: string; status: string }[];
      // The fake hypervisor's processes cannot outlive the daemon: a running persistent vm is `error`.
      expect(list.map((i) => [i.name, i.status])).to.deep.equal([
        ['keep', 'stopped'],
        ['run', 'error'],
      ]);
      expect((await d.call('POST', '/vms/keep/start')).json.status).to.equal('running');
      expect((await d.call('POST', '/vms/run/start')).json.status).to.equal('running');
    });
  });

  describe('unknown routes and methods', () => {
    it('answers 404 {error} for unknown routes and 405 with Allow for wrong methods', async () => {
      const nf = await d.call('GET', '/nope');
      expect(nf.status).to.equal(404);
      expect(nf.json.error).to.match(/no route/);
      const m = await d.call('PUT', '/vms/web');
      expect(m.status).to.equal(405);
      expect(m.headers.allow).to.match(/GET/);
      expect(m.json.error).to.match(/not allowed/);
      expect((await d.call('PATCH', '/secrets')).status).to.equal(405);
    });
  });

  describe('secrets', () => {
    it('stores secrets encrypted and never returns values', async () => {
      const put = await d.call('POST', '/secrets', { name: 'DB_PASS', value: 'hunter2-very-secret' });
      expect(put.status).to.equal(200);
      expect(put.json).to.include({ name: 'DB_PASS', size: 19, mode: '0600' });
      const bin = await d.call('POST', '/secrets', {
        name: 'blob',
        data_base64: Buffer.from([0, 1, 2, 255]).toString('base64'),
        mode: '0640',
      });
      expect(bin.json).to.include({ size: 4, mode: '0640' });
      const list = await d.call('GET', '/secrets');
      expect(list.json.map((s: { name: string }) => s.name)).to.deep.equal(['DB_PASS', 'blob']);
      expect(list.text).not.to.contain('hunter2');
      const onDisk = readFileSync(join(d.config.data_dir, 'secrets', 'DB_PASS.json'), 'utf8');
      expect(onDisk).not.to.contain('hunter2');
      expect(statSync(join(d.config.data_dir, 'secret.key')).mode & 0o777).to.equal(0o600);
      await d.daemon.stop();
      // activity.json holds no values either
      expect(readFileSync(join(d.config.data_dir, 'activity.json'), 'utf8')).not.to.contain('hunter2');
      await d.restart();
      expect((await d.call('GET', '/secrets')).json).to.have.length(2);
      expect((await d.call('DELETE', '/secrets/DB_PASS')).json).to.deep.equal({
        message: 'secret DB_PASS deleted',
        name: 'DB_PASS',
      });
      expect((await d.call('DELETE', '/secrets/DB_PASS')).status).to.equal(404);
    });

    it('stops the daemon with the reason when secret.key is damaged or missing with secrets stored, and never replaces it', async () => {
      expect((await d.call('POST', '/secrets', { name: 'KEEP', value: 'v' })).status).to.equal(200);
      const keyPath = join(d.config.data_dir, 'secret.key');
      const key = readFileSync(keyPath);
      await d.daemon.stop();
      writeFileSync(keyPath, key.subarray(0, 7));
      const damaged = await d.restart().then(
        () => undefined,
        (e: Error) => e,
      );
      expect(damaged?.message).to.match(/secret\.key is damaged \(7 bytes, not 32\); svcd will not replace it/);
      expect(readFileSync(keyPath).length).to.equal(7);
      rmSync(keyPath);
      const missing = await d.restart().then(
        () => undefined,
        (e: Error) => e,
      );
      expect(missing?.message).to.match(/secret\.key is missing but \d+ secret\(s\) are stored/);
      expect(existsSync(keyPath)).to.equal(false);
      // Another well-formed key (the wrong backup): caught at start by the check value.
      writeFileSync(keyPath, randomBytes(32), { mode: 0o600 });
      const wrong = await d.restart().then(
        () => undefined,
        (e: Error) => e,
      );
      expect(wrong?.message).to.match(/secret\.key is not the key the stored secrets were sealed with/);
      // A key from before check values: checked against a stored secret, then given one.
      const checkPath = join(d.config.data_dir, 'secret.key.check');
      rmSync(checkPath);
      const unchecked = await d.restart().then(
        () => undefined,
        (e: Error) => e,
      );
      expect(unchecked?.message).to.match(/does not open the stored secret KEEP/);
      expect(existsSync(checkPath)).to.equal(false);
      writeFileSync(keyPath, key, { mode: 0o600 });
      await d.restart();
      expect(statSync(checkPath).mode & 0o777).to.equal(0o600);
      expect((await d.call('GET', '/secrets')).json.map((x: { name: string }) => x.name)).to.include('KEEP');
      await d.call('DELETE', '/secrets/KEEP');
    });

    it('refuses bad secrets', async () => {
      for (const body of [
        { name: '1bad', value: 'x' },
        { name: 'a' },
        { name: 'a', value: 'x', data_base64: 'eA==' },
        { name: 'a', value: 1 },
        { name: 'a', value: 'x', mode: '999' },
        { name: 'a', value: 'x', other: 1 },
      ]) {
        const r = await d.call('POST', '/secrets', body);
        expect(r.status, JSON.stringify(body)).to.equal(400);
      }
      expect((await d.call('DELETE', '/secrets/bad%2Fname')).status).to.equal(400);
    });
  });

  describe('system routes', () => {
    it('serves metrics with the spec series and a running gauge computed from state', async () => {
      await d.call('POST', '/vms', { name: 'a', persistent: true });
      await d.call('POST', '/vms', { name: 'b' });
      await d.call('POST', '/vms/a/pause');
      await d.call('DELETE', '/vms/b');
      const m = await d.call('GET', '/metrics');
      expect(m.headers['content-type']).to.match(/^text\/plain/);
      expect(m.text).to.match(/^svc_vms_created_total 2$/m);
      expect(m.text).to.match(/^svc_vms_deleted_total 1$/m);
      expect(m.text).to.match(/^svc_vms_running 0$/m);
      expect(m.text).to.match(/^svc_create_errors_total 0$/m);
      expect(m.text).to.match(/svc_http_requests_total\{method="POST",route="\/vms",status="201"\} 2/);
      expect(m.text).to.match(/svc_create_duration_seconds_count\{outcome="ok"\} 2/);
      await d.call('POST', '/vms/a/resume');
      expect((await d.call('GET', '/metrics')).text).to.match(/^svc_vms_running 1$/m);
    });

    it('keeps an activity log, newest first, with limit and since, persisted in activity.json', async () => {
      await d.call('POST', '/vms', { name: 'a', persistent: true });
      await d.call('POST', '/vms/a/pause');
      await d.call('POST', '/vms/a/pause');
      const all = (await d.call('GET', '/activity')).json.events as { id: number; action: string; status: string }[];
      expect(all.map((e) => `${e.action}:${e.status}`)).to.deep.equal(['pause:error', 'pause:ok', 'create:ok']);
      const limited = (await d.call('GET', '/activity?limit=1')).json.events;
      expect(limited).to.have.length(1);
      const since = (await d.call('GET', `/activity?since=${all[1].id}`)).json.events;
      expect(since.map((e: { id: number }) => e.id)).to.deep.equal([all[0].id]);
      expect((await d.call('GET', '/activity?limit=abc')).status).to.equal(400);
      await d.restart();
      const after = (await d.call('GET', '/activity')).json.events;
      expect(after.slice(0, 3).map((e: { id: number }) => e.id)).to.deep.equal(all.map((e) => e.id));
    });

    it('serves the API description as YAML on both paths', async () => {
      const y = await d.call('GET', '/openapi.yaml');
      const j = await d.call('GET', '/openapi.json');
      expect(y.headers['content-type']).to.match(/^application\/yaml/);
      expect(j.headers['content-type']).to.match(/^application\/yaml/);
      expect(j.text).to.equal(y.text);
      expect(y.text).to.match(/version: 0\.2\.2/);
    });
  });
});
