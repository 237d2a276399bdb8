import { expect } from 'chai';
import type { InMemoryHypervisor } from '../../src/adapters/hypervisor/fake/in-memory-hypervisor.js';
import { Hypervisor } from '../../src/ports/hypervisor.js';
import { VmStore } from '../../src/ports/stores.js';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { GuestAgent } from '../../src/ports/guest-agent.js';
import { ndjson } from '../helpers/http.js';

describe('forks of a running vm (fake hypervisor)', function () {
  this.timeout(60000);
  let d: TestDaemon;
  let hv: InMemoryHypervisor;
  const names = async () => ((await d.call('GET', '/vms')).json as { name: string }[]).map((i) => i.name).sort();

  before(async () => {
    d = await startTestDaemon({ max_vms: 8 });
    hv = d.daemon.container.get<InMemoryHypervisor>(Hypervisor);
    expect((await d.call('POST', '/vms', { name: 'src', cpus: 2, memory_mb: 256, tags: { a: '1' } })).status).to.equal(
      201,
    );
  });
  after(async () => d.stop());

  it('forks a running vm into count copies of its shape, the source running on, the capture dropped', async () => {
    const r = await d.call('POST', '/vms/src/fork', { count: 2, tags: { k: 'v' } });
    expect(r.status, r.text).to.equal(201);
    expect(r.json.source).to.equal('src');
    expect(r.json.paused_ms).to.be.a('number');
    const vms = r.json.vms as Record<string, unknown>[];
    expect(vms.map((v) => v.name)).to.deep.equal(['src-fork-1', 'src-fork-2']);
    for (const v of vms) {
      expect(v).to.include({ from: 'src', cpus: 2, memory_mb: 256, status: 'running', persistent: false });
      expect(v.tags).to.deep.equal({ k: 'v' });
    }
    expect((await d.call('GET', '/vms/src')).json.status).to.equal('running');
    expect(hv.heldCaptures('src')).to.deep.equal([]);
    // The next fork's default name skips those taken.
    const s = ndjson((await d.call('POST', '/vms/src/fork?stream=1', {})).text);
    expect(s[0]).to.include({ phase: 'capture', name: 'src' });
    expect(s[0].message).to.match(/captured vm src for 1 fork\(s\); it was held \d+ ms/);
    expect(s.at(-1)).to.include({ phase: 'ready', name: 'src-fork-3' });
    expect(s.find((e) => e.phase === 'boot')!.message).to.match(/restoring from the snapshot of the capture of vm src/);
    for (const n of ['src-fork-1', 'src-fork-2', 'src-fork-3']) await d.call('DELETE', `/vms/${n}`);
  });

  it('forks a vm with host folders: its guest lets go of them for the capture and mounts them again, each fork given them as it wakes', async () => {
    const folder = tempDir('svc-fork-share-');
    Object.assign(d.config, { mount_dirs: [folder] });
    const made = await d.call('POST', '/vms', {
      name: 'shared',
      mounts: [{ host: folder, guest: '/mnt/f', tag: 'f' }],
    });
    expect(made.status, made.text).to.equal(201);
    const mounts = made.json.mounts;
    const agent: GuestAgent = d.daemon.container.get<GuestAgent>(GuestAgent);
    const exec = agent.exec;
    const ran: [number, string][] = [];
    let keep = false;
    // What the record says while the capture is taken: a daemon that died then would find both marks.
    const store = d.daemon.container.get<VmStore>(VmStore);
    const marks: Record<string, unknown>[] = [];
    const capture = hv.capture.bind(hv);
    hv.capture = async (ref, ...rest) => {
      const rec = await store.get(ref.name);
      marks.push({ saving: rec?.saving, shares_out: rec?.shares_out });
      return capture(ref, ...rest);
    };
    agent.exec = async (ep, req) => {
      const script = req.args[1];
      ran.push([ep.port, script]);
      const busy = keep && script === hv.releaseMounts(mounts);
      return { stdout: '', stderr: busy ? 'f at /mnt/f is in use\n' : '', exit_code: busy ? 1 : 0 };
    };
    try {
      const r = await d.call('POST', '/vms/shared/fork', { names: ['shared-f'] });
      expect(r.status, r.text).to.equal(201);
      expect(r.json.vms[0].mounts).to.deep.equal(mounts);
      const port = made.json.agent_port;
      expect(ran).to.deep.equal([
        [port, hv.releaseMounts(mounts)],
        [port, hv.mountsAfterRestore(mounts)],
        [r.json.vms[0].agent_port, hv.mountsAfterRestore(mounts)],
      ]);
      expect(marks).to.deep.equal([{ saving: true, shares_out: true }]);
      const after = await store.get('shared');
      expect([after?.saving, after?.shares_out], 'both gone once the folders are back').to.deep.equal([
        undefined,
        undefined,
      ]);
      // A guest that keeps a folder in use is not captured, and mounts what it let go of.
      keep = true;
      ran.length = 0;
      const busy = await d.call('POST', '/vms/shared/fork', { names: ['shared-g'] });
      expect(busy.status, busy.text).to.equal(400);
      expect(busy.json.error).to.match(/^vm shared could not let go of its host folders for the capture/);
      expect(ran.map(([, s]) => s)).to.deep.equal([hv.releaseMounts(mounts), hv.mountsAfterRestore(mounts)]);
      expect(hv.heldCaptures('shared')).to.deep.equal([]);
      expect((await d.call('GET', '/vms/shared-g')).status).to.equal(404);
      // A paused one cannot be asked.
      await d.call('POST', '/vms/shared/pause');
      const paused = await d.call('POST', '/vms/shared/fork', {});
      expect(paused.status).to.equal(400);
      expect(paused.json.error).to.match(/is paused and shares host folders.*resume it first/);
    } finally {
      hv.capture = capture;
      agent.exec = exec;
      for (const n of ['shared-f', 'shared']) await d.call('DELETE', `/vms/${n}`);
    }
  });

  it('forks a paused vm, which stays paused', async () => {
    await d.call('POST', '/vms/src/pause');
    const r = await d.call('POST', '/vms/src/fork', { names: ['p1'] });
    expect(r.status, r.text).to.equal(201);
    expect((await d.call('GET', '/vms/src')).json.status).to.equal('paused');
    await d.call('POST', '/vms/src/resume');
    await d.call('DELETE', '/vms/p1');
  });

  it('refuses bad requests before capturing anything', async () => {
    const cases: [string, unknown, number, RegExp][] = [
      ['src', { count: 0 }, 400, /count must be an integer from 1 to 100, got 0/],
      ['src', { count: 101 }, 400, /count must be an integer from 1 to 100/],
      ['src', { count: 2, names: ['a'] }, 400, /count is 2 but 1 names are given/],
      ['src', { names: ['a', 'a'] }, 400, /a is given twice/],
      ['src', { names: ['Bad'] }, 400, /invalid vm name/],
      ['src', { names: ['src'] }, 409, /vm src already exists/],
      ['src', { cpus: 4 }, 400, /unknown field "cpus" in fork request/],
      ['src', { tags: 'x' }, 400, /tags must be an object/],
      ['ghost', {}, 404, /vm ghost not found/],
    ];
    for (const [vm, body, status, re] of cases) {
      const r = await d.call('POST', `/vms/${vm}/fork`, body);
      expect(r.status, `${JSON.stringify(body)}: ${r.text}`).to.equal(status);
      expect(r.json.error).to.match(re);
    }
    expect(hv.heldCaptures('src')).to.deep.equal([]);
    expect(await names()).to.deep.equal(['src']);
  });

  it('refuses a stopped source, naming clone instead', async () => {
    await d.call('POST', '/vms', { name: 'cold', persistent: true });
    await d.call('POST', '/vms/cold/shutdown');
    const r = await d.call('POST', '/vms/cold/fork', {});
    expect(r.status).to.equal(400);
    expect(r.json.error).to.equal(
      'vm cold is stopped; a fork needs a running or paused vm (clone it instead: svc clone cold)',
    );
    await d.call('DELETE', '/vms/cold');
  });

  it('makes all the forks or none: a failure midway removes those made and leaves the source running', async () => {
    // max_vms 8 with the source: 7 fit, the 8th fork is refused at its reservation.
    const r = await d.call('POST', '/vms/src/fork', { count: 8 });
    expect(r.status, r.text).to.equal(429);
    expect(r.json.error).to.match(/max_vms \(8\) reached/);
    expect(await names()).to.deep.equal(['src']);
    // A fork whose disk step fails: the others go with it.
    hv.failNext('clone', 'injected disk failure');
    const s = await d.call('POST', '/vms/src/fork', { count: 3 });
    expect(s.status).to.equal(500);
    expect(s.json.error).to.match(/injected disk failure/);
    expect(await names()).to.deep.equal(['src']);
    expect(hv.heldCaptures('src')).to.deep.equal([]);
    expect((await d.call('GET', '/vms/src')).json.status).to.equal('running');
    // A fork whose saved state does not load would cold-boot, its processes and memory lost: it fails.
    hv.failNext('restore');
    const cold = await d.call('POST', '/vms/src/fork', { count: 2 });
    // a failed create is a 500 (decisions.md); its code says it may work again
    expect([cold.status, cold.json.code]).to.deep.equal([500, 'unavailable']);
    expect(cold.json.error).to.match(
      /^fork src-fork-\d could not be restored from the capture of src: the saved state did not load \(failNext\); fork again$/,
    );
    expect(await names()).to.deep.equal(['src']);
    // A capture that fails: nothing made, the source as it was.
    hv.failNext('capture', 'injected capture failure');
    const c = await d.call('POST', '/vms/src/fork', {});
    expect(c.status).to.equal(500);
    expect(await names()).to.deep.equal(['src']);
  });
});
