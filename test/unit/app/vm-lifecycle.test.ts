import { expect } from 'chai';
import { toPublic } from '../../../src/domain/vm.js';
import type { CreateProgressEvent } from '../../../src/domain/events.js';
import {
  AlreadyExistsError,
  DeadlineExceededError,
  InternalError,
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
  ResourceExhaustedError,
} from '../../../src/domain/errors.js';
import { world as appWorld, type World } from '../../fakes/world.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GuestAgent } from '../../../src/ports/guest-agent.js';
import { GuestShares } from '../../../src/app/guest-shares.js';
import { poll } from '../../helpers/wait.js';

/** The world, with the reads the daemon's routes make (list, get) as the API answers them. */
function world(...args: Parameters<typeof appWorld>): World & {
  svc: World['svc'] & { list(): ReturnType<World['vms']['list']>; get(n: string): ReturnType<typeof toPublic> };
} {
  const w = appWorld(...args);
  const svc = Object.assign(Object.create(w.svc) as World['svc'], {
    list: () => w.vms.list(),
    get: (n: string) => toPublic(w.vms.get(n)),
  });
  return { ...w, svc };
}

async function collect(events: AsyncIterable<CreateProgressEvent>): Promise<CreateProgressEvent[]> {
  const out: CreateProgressEvent[] = [];
  for await (const e of events) out.push(e);
  return out;
}

describe('app/VmLifecycle', () => {
  it('creates a running vm and streams the phases in order', async () => {
    const w = world();
    const job = await w.creates.create({ name: 'web', persistent: true }, {});
    const events = await collect(job.events);
    expect(events.map((e) => e.phase)).to.deep.equal(['accepted', 'disk', 'boot', 'wait_agent', 'ready']);
    const inst = await job.done;
    expect(inst.status).to.equal('running');
    expect(events.at(-1)!.instance).to.deep.equal(inst);
    expect(w.store.records.get('web')!.status).to.equal('running');
    expect(w.metrics.created).to.equal(1);
    expect(w.metrics.running()).to.equal(1);
    expect(w.activity.events.at(-1)).to.include({ action: 'create', target: 'web', status: 'ok' });
  });

  it('waits for ssh on images that are not agent-ready, and in the modes asked for', async () => {
    const w = world();
    const ssh = await collect((await w.creates.create({ name: 'a', image: 'ssh-only' }, {})).events);
    expect(ssh.map((e) => e.phase))
      .to.include('wait_ssh')
      .and.not.include('wait_agent');
    const ud = await collect((await w.creates.create({ name: 'b' }, { wait: 'userdata' })).events);
    expect(ud.map((e) => e.phase)).to.deep.equal(['accepted', 'disk', 'boot', 'wait_agent', 'userdata', 'ready']);
    const bs = await collect((await w.creates.create({ name: 'c' }, { wait: 'bootstrap' })).events);
    expect(bs.map((e) => e.phase)).to.include('bootstrap');
  });

  it('names vms vm-N when no name is given', async () => {
    const w = world();
    expect((await w.creates.create({}, {})).name).to.equal('vm-1');
    expect((await w.creates.create(undefined, {})).name).to.equal('vm-2');
  });

  it('refuses duplicates, bad input and unknown images before anything exists', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'web' }, {})
    ).done;
    let err = await w.creates.create({ name: 'web' }, {}).catch((e) => e);
    expect(err).to.be.instanceOf(AlreadyExistsError);
    err = await w.creates.create({ name: 'x', image: 'nope' }, {}).catch((e) => e);
    expect(err).to.be.instanceOf(InvalidArgumentError);
    err = await w.creates.create({ name: 'x' }, { wait: 'false' }).catch((e) => e);
    expect(err).to.be.instanceOf(InvalidArgumentError);
    expect(w.svc.list().map((i) => i.name)).to.deep.equal(['web']);
  });

  for (const [image, re] of [
    ['fail-provision', /disk failure/],
    ['fail-boot', /boot failure/],
  ] as const) {
    it(`removes every trace of a create that fails (${image})`, async () => {
      const w = world();
      const job = await w.creates.create({ name: 'bad', image }, {});
      const events = await collect(job.events);
      expect(events.at(-1)).to.include({ phase: 'error' });
      expect(events.at(-1)!.error).to.match(re);
      expect(await job.done.catch((e) => e)).to.be.instanceOf(InternalError);
      expect(w.svc.list()).to.deep.equal([]);
      expect(w.store.records.size).to.equal(0);
      expect(w.hv.state('bad')).to.equal(undefined);
      expect(w.store.logsKept).to.deep.equal(['bad']);
      expect(w.metrics.failed).to.equal(1);
    });
  }

  it('fails a create at its deadline with DeadlineExceeded and cleans up', async () => {
    const w = world();
    const job = await w.creates.create({ name: 'slow', image: 'never-ready' }, { timeout: '400ms' });
    const err = await job.done.catch((e) => e);
    expect(err).to.be.instanceOf(DeadlineExceededError);
    expect(w.svc.list()).to.deep.equal([]);
    expect(w.hv.live()).to.deep.equal([]);
  });

  it('fails a create at once when the vm process dies while waiting', async () => {
    const w = world();
    const job = await w.creates.create({ name: 'dies', image: 'never-ready' }, { timeout: '30s' });
    setTimeout(() => void w.hv.crash('dies'), 100);
    const t0 = Date.now();
    const err = await job.done.catch((e) => e);
    expect(err).to.be.instanceOf(InternalError);
    expect(err.message).to.match(/stopped while waiting/);
    expect(Date.now() - t0).to.be.below(5000);
  });

  it('checks caps atomically: of concurrent creates only those that fit succeed (429 for the rest)', async () => {
    const w = world({ max_vms: 3 });
    const results = await Promise.allSettled(
      Array.from({ length: 6 }, (_, i) => w.creates.create({ name: `v${i}` }, {})),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).to.have.length(3);
    for (const r of results.filter((r) => r.status === 'rejected')) {
      expect((r as PromiseRejectedResult).reason).to.be.instanceOf(ResourceExhaustedError);
    }
  });

  it('counts cpus and memory only of vms that hold them', async () => {
    const w = world({ max_cpus_total: 2 });
    await (
      await w.creates.create({ name: 'a', cpus: 2, persistent: true }, {})
    ).done;
    expect(await w.creates.create({ name: 'b' }, {}).catch((e) => e)).to.be.instanceOf(ResourceExhaustedError);
    await w.svc.suspend('a');
    await (
      await w.creates.create({ name: 'b' }, {})
    ).done;
  });

  it('walks the whole lifecycle of a persistent vm', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'p', persistent: true }, {})
    ).done;
    await w.svc.pause('p');
    expect(w.svc.get('p').status).to.equal('paused');
    expect(w.hv.state('p')).to.equal('paused');
    await w.svc.resume('p');
    await w.svc.suspend('p');
    const s = w.svc.get('p');
    expect(s.status).to.equal('suspended');
    expect(s.suspended_at).to.be.a('string');
    const launch = w.hv.launch.bind(w.hv);
    let restored: boolean | undefined;
    w.hv.launch = async (...a) => {
      const h = await launch(...a);
      restored = h.restored_from_snapshot;
      return h;
    };
    const r = await w.svc.restore('p');
    expect(r.status).to.equal('running');
    expect(r.suspended_at).to.equal(undefined);
    expect(restored).to.equal(true);
    await w.svc.shutdown('p');
    expect(w.svc.get('p').status).to.equal('stopped');
    expect((await w.svc.shutdown('p')).message).to.match(/already stopped/);
    expect((await w.svc.start('p')).status).to.equal('running');
    await w.svc.delete('p');
    expect(() => w.svc.get('p')).to.throw(NotFoundError);
    expect(w.metrics.deleted).to.equal(1);
  });

  it('says in the activity log when a restore cold-booted, and why', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'p', persistent: true }, {})
    ).done;
    await w.svc.suspend('p');
    await w.svc.restore('p');
    expect(w.activity.events.at(-1)).to.include({ action: 'restore', target: 'p', status: 'ok' });
    expect(w.activity.events.at(-1)).not.to.have.property('message');
    await w.svc.suspend('p');
    w.hv.failNext('restore');
    const cold = await w.svc.restore('p');
    expect(cold.status).to.equal('running');
    expect(cold.warning).to.match(/^cold-booted, its processes ended: the saved state did not load/);
    expect(toPublic(w.vms.get('p'))).not.to.have.property('warning');
    expect(w.activity.events.at(-1)).to.include({ action: 'restore', status: 'ok' });
    expect(w.activity.events.at(-1)?.message).to.match(/^cold-booted: the saved state did not load/);
    // a clone of the suspended VM whose state does not load is made cold, and says so
    await w.svc.suspend('p');
    w.hv.failNext('restore');
    const clone = await (await w.creates.create({ name: 'c', from: 'p' }, {})).done;
    expect(clone.status).to.equal('running');
    expect(clone.warning).to.match(/^cold-booted, the template's processes did not come along: the saved state/);
    expect(w.activity.events.find((e) => e.action === 'create' && e.target === 'c')?.message).to.equal(clone.warning);
    const warm = await (await w.creates.create({ name: 'c2', from: 'p' }, {})).done;
    expect(warm).not.to.have.property('warning');
  });

  it('restores paused: the guest is not asked anything until its resume, which wakes it as a restore does', async () => {
    const folder = mkdtempSync(join(tmpdir(), 'svc-paused-restore-'));
    try {
      const w = world({ mount_dirs: [folder] });
      const agent = w.container.get<GuestAgent>(GuestAgent);
      const asked: string[] = [];
      agent.setIdentity = async (_ep, id) => void asked.push(`identity ${id.hostname}`);
      agent.exec = async (_ep, req) => {
        asked.push(`exec ${req.args[1]}`);
        return { stdout: '', stderr: '', exit_code: 0 };
      };
      const mounts = [{ host: folder, guest: '/mnt/data', tag: 'data' }];
      const inst = await (await w.creates.create({ name: 'p', persistent: true, mounts }, {})).done;
      await w.svc.suspend('p');
      asked.length = 0;
      const held = await w.svc.restore('p', { paused: true });
      expect([held.status, held.warning, w.hv.state('p'), asked]).to.deep.equal(['paused', undefined, 'paused', []]);
      expect(w.vms.get('p')).to.include({ wake_at_resume: true });
      expect(held).not.to.have.property('wake_at_resume');
      // its resume wakes it: its folders and its clock, as a restore's guest
      await w.svc.resume('p');
      expect(w.vms.get('p').status).to.equal('running');
      expect(w.vms.get('p')).not.to.have.property('wake_at_resume');
      expect(asked).to.deep.equal(['identity p', `exec ${w.hv.mountsAfterRestore(inst.mounts)}`]);
      // a pause and resume after it asks nothing
      await w.svc.pause('p');
      await w.svc.resume('p');
      expect(asked).to.have.length(2);
      // suspended again while held, it is no longer (a paused guest with folders is saved without its state)
      await w.svc.suspend('p');
      await w.svc.restore('p', { paused: true });
      await w.svc.suspend('p');
      expect(w.vms.get('p')).not.to.have.property('wake_at_resume');
      expect((await w.svc.restore('p', { paused: true })).status).to.equal('running');
      // a saved state that does not load cold-boots: it runs, saying so
      await w.svc.suspend('p');
      w.hv.failNext('restore');
      const cold = await w.svc.restore('p', { paused: true });
      expect([cold.status, w.hv.state('p')]).to.deep.equal(['running', 'running']);
      expect(cold.warning).to.match(/^cold-booted/);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });

  it('saves a vm with host folders once its guest let go of them, and has it mount them as it wakes; one in use is not saved', async () => {
    const folder = mkdtempSync(join(tmpdir(), 'svc-suspend-share-'));
    try {
      const w = world({ mount_dirs: [folder] });
      const ran: string[] = [];
      let answer = 0;
      const agent: GuestAgent = w.container.get<GuestAgent>(GuestAgent);
      agent.exec = async (_ep, req) => {
        ran.push(req.args[1]);
        return { stdout: '', stderr: answer ? 'data at /mnt/data is in use\n' : '', exit_code: answer };
      };
      const mounts = [{ host: folder, guest: '/mnt/data', tag: 'data' }];
      const inst = await (await w.creates.create({ name: 'p', persistent: true, mounts }, {})).done;
      expect(ran).to.deep.equal([]); // a booted guest mounted them at boot
      expect((await w.svc.suspend('p')).message).to.equal('vm p suspended');
      expect(ran).to.deep.equal([w.hv.releaseMounts(inst.mounts)]);
      const r = await w.svc.restore('p');
      expect(r.warning).to.equal(undefined);
      expect(ran).to.deep.equal([w.hv.releaseMounts(inst.mounts), w.hv.mountsAfterRestore(inst.mounts)]);
      // A guest that keeps a share (a process holds a file in it) is not saved: its restore boots.
      answer = 1;
      expect((await w.svc.suspend('p')).message).to.equal('vm p suspended (no snapshot: restore will cold-boot)');
      expect(ran).to.have.length(3);
      expect((await w.svc.restore('p')).warning).to.match(/^cold-booted/);
      expect(ran).to.have.length(3);
      // A paused guest cannot be asked: not saved either.
      await w.svc.pause('p');
      expect((await w.svc.suspend('p')).message).to.match(/no snapshot/);
      expect(ran).to.have.length(3);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });

  it('gives a running guest back the host folders it let go of for a save its daemon died in, or a save that failed', async () => {
    const folder = mkdtempSync(join(tmpdir(), 'svc-giveback-share-'));
    const recording = (w: World) => {
      const ran: string[] = [];
      w.container.get<GuestAgent>(GuestAgent).exec = async (_ep, req) => {
        ran.push(req.args[1]);
        return { stdout: '', stderr: '', exit_code: 0 };
      };
      return ran;
    };
    try {
      const w = world({ mount_dirs: [folder] });
      recording(w);
      const mounts = [{ host: folder, guest: '/mnt/data', tag: 'data' }];
      const inst = await (await w.creates.create({ name: 'p', persistent: true, mounts }, {})).done;
      // The daemon dies once the guest has let go of its folders, before it is saved:
      expect(await w.container.get(GuestShares).release(w.vms.get('p'))).to.equal(true);
      expect((await w.store.get('p'))?.shares_out, 'marked before the guest is told').to.equal(true);
      expect(toPublic(w.vms.get('p'))).not.to.have.property('shares_out');
      const w2 = world({ mount_dirs: [folder] }, w.store, w.hv);
      const ran = recording(w2);
      await w2.recovery.init();
      expect(w.hv.sharesGivenBack).to.deep.equal(['p']);
      expect(ran).to.deep.equal([w.hv.mountsAfterRestore(inst.mounts)]);
      expect((await w.store.get('p'))?.shares_out).to.equal(undefined);
      // A daemon that starts after that has nothing to give back.
      await world({ mount_dirs: [folder] }, w.store, w.hv).recovery.init();
      expect(w.hv.sharesGivenBack).to.have.length(1);
      // A suspend whose save fails leaves the guest running: its folders are given back.
      w2.hv.failNext('suspend');
      expect(await w2.svc.suspend('p').catch((e: Error) => e.message)).to.equal('injected suspend failure');
      expect(w2.svc.get('p').status).to.equal('running');
      expect(ran).to.deep.equal([
        w.hv.mountsAfterRestore(inst.mounts),
        w.hv.releaseMounts(inst.mounts),
        w.hv.mountsAfterRestore(inst.mounts),
      ]);
      expect(w.hv.sharesGivenBack).to.deep.equal(['p', 'p']);
      expect((await w.store.get('p'))?.shares_out).to.equal(undefined);
      // A restore: the record says running before the woken guest mounts its folders, and is marked.
      expect((await w2.svc.suspend('p')).message).to.equal('vm p suspended');
      const exec = w2.container.get<GuestAgent>(GuestAgent).exec;
      let marked: boolean | undefined;
      w2.container.get<GuestAgent>(GuestAgent).exec = async (ep, req) => {
        marked = (await w.store.get('p'))?.shares_out;
        return exec(ep, req);
      };
      await w2.svc.restore('p');
      expect(marked, 'marked while its folders were mounted').to.equal(true);
      expect((await w.store.get('p'))?.shares_out).to.equal(undefined);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });

  it('at init, has the guest of a vm whose daemon died in its save run on, and a paused one stay paused', async () => {
    const w = world();
    for (const name of ['p', 'q']) await (await w.creates.create({ name, persistent: true }, {})).done;
    await w.svc.pause('q');
    // Each save stops its guest, and the daemon dies in it: it never answers.
    const marked: Record<string, boolean | undefined> = {};
    const suspend = w.hv.suspend.bind(w.hv);
    w.hv.suspend = async (ref) => {
      marked[ref.name] = (await w.store.get(ref.name))?.saving;
      if (w.hv.state(ref.name) === 'running') await w.hv.pause(ref);
      return new Promise(() => undefined);
    };
    void w.svc.suspend('p');
    void w.svc.suspend('q');
    await poll(() => Object.keys(marked).length >= 2, { ms: 1000, every: 10 });
    w.hv.suspend = suspend;
    expect(marked, 'marked before the save').to.deep.equal({ p: true, q: true });
    const w2 = world({}, w.store, w.hv);
    await w2.recovery.init();
    expect([w.hv.state('p'), w.hv.state('q')]).to.deep.equal(['running', 'paused']);
    expect(w2.svc.list().map((i) => [i.name, i.status])).to.deep.equal([
      ['p', 'running'],
      ['q', 'paused'],
    ]);
    for (const name of ['p', 'q']) expect((await w.store.get(name))?.saving).to.equal(undefined);
    expect((await w2.svc.suspend('p')).message).to.equal('vm p suspended');
  });

  it('removes an ephemeral vm on shutdown and refuses to suspend it', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'e' }, {})
    ).done;
    expect(await w.svc.suspend('e').catch((x) => x)).to.be.instanceOf(InvalidStateError);
    const out = await w.svc.shutdown('e');
    expect(out.message).to.match(/removed/);
    expect(() => w.svc.get('e')).to.throw(NotFoundError);
    expect(w.store.records.has('e')).to.equal(false);
  });

  it('refuses wrong transitions with the verb to use', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'p', persistent: true }, {})
    ).done;
    const err = await w.svc.resume('p').catch((e) => e);
    expect(err).to.be.instanceOf(InvalidStateError);
    expect(err.message).to.equal('vm p is already running; use pause, suspend or shutdown');
    expect(await w.svc.restore('p').catch((e) => e)).to.be.instanceOf(InvalidStateError);
    expect(
      await w.svc
        .start('p')
        .catch((e) => e)
        .then((e) => e.message),
    ).to.match(/already running/);
  });

  it('marks a vm whose process dies as error, and a persistent one can start again', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'p', persistent: true }, {})
    ).done;
    await w.hv.crash('p', 'killed by signal 9');
    await new Promise((r) => setTimeout(r, 20));
    const inst = w.svc.get('p');
    expect(inst.status).to.equal('error');
    expect(inst.error).to.match(/signal 9/);
    expect((await w.svc.start('p')).status).to.equal('running');
  });

  it('serializes operations on one vm', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'p', persistent: true }, {})
    ).done;
    const results = await Promise.allSettled([w.svc.pause('p'), w.svc.pause('p'), w.svc.resume('p')]);
    expect(results.map((r) => r.status)).to.deep.equal(['fulfilled', 'rejected', 'fulfilled']);
    expect(w.svc.get('p').status).to.equal('running');
  });

  it('rolls back interrupted creates and handles dead processes at init', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'keep', persistent: true }, {})
    ).done;
    await (
      await w.creates.create({ name: 'eph' }, {})
    ).done;
    await (
      await w.creates.create({ name: 'stopped', persistent: true }, {})
    ).done;
    await w.svc.shutdown('stopped');
    const half = structuredClone(w.store.records.get('keep')!);
    half.name = 'half';
    half.status = 'creating';
    await w.store.put(half);
    // A new daemon over the same store: the in-memory processes are gone.
    const w2 = world({}, w.store);
    await w2.recovery.init();
    expect(w2.svc.list().map((i) => [i.name, i.status])).to.deep.equal([
      ['keep', 'error'],
      ['stopped', 'stopped'],
    ]);
    expect(w2.store.records.has('half')).to.equal(false);
    expect(w2.store.records.has('eph')).to.equal(false);
  });

  it('at init, takes a vm whose suspend the adapter finished but the daemon never recorded as suspended, and restores it', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'saved', persistent: true }, {})
    ).done;
    await (
      await w.creates.create({ name: 'lost', persistent: true }, {})
    ).done;
    // The daemon died right after the adapter saved and stopped the VM: the record still says running.
    await w.hv.suspend({ name: 'saved', dir: '/nowhere' });
    await w.hv.kill({ name: 'lost', dir: '/nowhere' });
    const w2 = world({}, w.store, w.hv);
    await w2.recovery.init();
    expect(w2.svc.list().map((i) => [i.name, i.status])).to.deep.equal([
      ['lost', 'error'],
      ['saved', 'suspended'],
    ]);
    expect(w2.svc.get('saved').suspended_at).to.be.a('string');
    await w2.svc.restore('saved');
    expect(w2.svc.get('saved').status).to.equal('running');
  });

  it('emits lifecycle events for other services', async () => {
    const w = world();
    const seen: string[] = [];
    for (const e of ['up', 'down', 'removed'] as const) w.listen(e, (r) => void seen.push(`${e}:${r.name}`));
    await (
      await w.creates.create({ name: 'p', persistent: true }, {})
    ).done;
    await w.svc.suspend('p');
    await w.svc.restore('p');
    await w.svc.delete('p');
    expect(seen).to.deep.equal(['up:p', 'down:p', 'up:p', 'removed:p']);
  });
});
