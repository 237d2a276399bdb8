import { expect } from 'chai';
import { clearRuntime, type VmRecord } from '../../../src/domain/vm.js';
import { world } from '../../fakes/world.js';
import { GuestAgent } from '../../../src/ports/guest-agent.js';
import type { GuestIdentity } from '../../../src/domain/agent.js';
import { AgentFailureError, AgentUnavailableError, InvalidArgumentError } from '../../../src/domain/errors.js';
import type { GuestWarmUpCalls } from '../../../src/ports/clone-speed-ups.js';
import { InMemoryHypervisor } from '../../../src/adapters/hypervisor/fake/in-memory-hypervisor.js';

describe('app/VmKeeper', () => {
  it('keeps the adapter state opaque: what a handle puts in a record comes back as the same handle', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'a', persistent: true, forwards: [{ host_port: 0, guest_port: 80 }] }, {})
    ).done;
    const rec = w.vms.get('a');
    const h = w.keeper.handleOf(rec)!;
    expect(h.state).to.equal(rec.runtime);
    expect(h.agent_port).to.equal(rec.agent_port);
    expect(h.forwards.map((f) => f.guest_port)).to.deep.equal([80]);
    expect(await w.hv.reattach(w.keeper.ref(rec), h)).to.include({ agent_port: rec.agent_port });
    // The process a handle names is the VM's pid while it runs (ps may show a clone under its spare's name).
    w.keeper.applyHandle(rec, { ...h, pid: 4242 });
    expect(rec.pid).to.equal(4242);
    expect(w.keeper.handleOf(rec)!.pid).to.equal(4242);
    w.keeper.applyHandle(rec, { ...h, pid: undefined });
    expect(rec).to.not.have.property('pid');
  });

  it('clears what belonged to a stopped process but keeps forwards (live ones without their tunnel pid)', () => {
    const w = world();
    const rec = {
      name: 'r',
      ssh_port: 1,
      agent_port: 2,
      agent_cid: 3,
      pid: 77,
      runtime: {} as VmRecord['runtime'],
      forwards: [
        { host_port: 8080, guest_port: 80, proto: 'tcp', kind: 'boot', pid: 9 },
        { host_port: 9090, guest_port: 90, proto: 'tcp', kind: 'live', pid: 9 },
      ],
    } as VmRecord;
    clearRuntime(rec);
    expect(rec).to.include({ ssh_port: 0, agent_port: 0, agent_cid: 0 });
    expect(rec.runtime).to.equal(undefined);
    expect(rec).to.not.have.property('pid');
    expect(rec.forwards).to.deep.equal([
      { host_port: 8080, guest_port: 80, proto: 'tcp', kind: 'boot' },
      { host_port: 9090, guest_port: 90, proto: 'tcp', kind: 'live' },
    ]);
    expect(w.keeper.handleOf(rec)).to.equal(undefined);
  });

  it('marks a vm whose process dies on its own as error, persists it, logs a crash and announces it down', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'c', persistent: true }, {})
    ).done;
    const down: string[] = [];
    w.listen('down', (r) => void down.push(r.name));
    await w.hv.crash('c', 'killed by SIGKILL');
    await new Promise((r) => setTimeout(r, 20));
    expect(w.vms.get('c')).to.include({ status: 'error', error: 'vm process exited unexpectedly: killed by SIGKILL' });
    expect(w.store.records.get('c')!.status).to.equal('error');
    expect(w.activity.events.at(-1)).to.include({ action: 'crash', target: 'c', status: 'error' });
    expect(down).to.deep.equal(['c']);
  });

  it('does not call an exit it asked for a crash', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 's', persistent: true }, {})
    ).done;
    await w.svc.shutdown('s');
    expect(w.vms.get('s').status).to.equal('stopped');
    expect(w.activity.events.some((e) => e.action === 'crash')).to.equal(false);
  });

  it('leaves a vm that fails to boot in error with no process, and it can be started again', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'b', persistent: true }, {})
    ).done;
    await w.svc.shutdown('b');
    w.hv.failNext('launch', 'no memory');
    expect((await w.svc.start('b').catch((e) => e)).message).to.equal('no memory');
    expect(w.vms.get('b').status).to.equal('stopped');
    expect((await w.svc.start('b')).status).to.equal('running');
  });

  it('says what the console printed last when a started guest dies before its agent answers', async () => {
    const said = 'Kernel panic - not syncing: Attempted to kill init!';
    const consoles = {
      async *read(vm: string, opts: { tail?: number }) {
        expect(opts.tail).to.be.above(0);
        yield Buffer.from(`[    0.51] ${vm} booting\n[    0.92] ${said}\n`);
      },
      size: async () => 0,
    };
    const w = world({}, undefined, new InMemoryHypervisor({ bootDelayMs: 300 }), consoles);
    await (
      await w.creates.create({ name: 'p', persistent: true }, {})
    ).done;
    await w.svc.shutdown('p');
    setTimeout(() => void w.hv.crash('p', 'exited with status 1'), 50);
    const err = (await w.svc.start('p').catch((e: Error) => e)) as Error;
    expect(err.message).to.match(/^vm p stopped while waiting for the guest agent/);
    expect(err.message).to.contain(`  | [    0.92] ${said}`);
    expect(err.message).to.contain('(the whole console: svc logs p)');
    expect(w.vms.get('p').status).to.equal('error');
  });

  it('purges every trace: process, record, store, and announces the removal', async () => {
    const w = world();
    await (
      await w.creates.create({ name: 'p' }, {})
    ).done;
    const removed: string[] = [];
    w.listen('removed', (r) => void removed.push(r.name));
    await w.keeper.purge(w.vms.get('p'));
    expect(w.vms.find('p')).to.equal(undefined);
    expect(w.store.records.has('p')).to.equal(false);
    expect(w.hv.live()).to.deep.equal([]);
    expect(removed).to.deep.equal(['p']);
  });

  it('warms the identity and exec paths of a running guest before a suspend saves it; a paused or silent guest is saved as is', async function () {
    this.timeout(10_000);
    // Only where the driver restores guests ahead of clones (CloneSpeedUps); the fake gets the capability here.
    const hv = new InMemoryHypervisor({ bootDelayMs: 5 });
    Object.assign(hv, { cloneReady: () => undefined, warmWith: () => undefined });
    const w = world({}, undefined, hv);
    const agent = w.container.get<GuestAgent>(GuestAgent);
    const calls: GuestIdentity[] = [];
    const execs: string[] = [];
    let hang = false;
    agent.setIdentity = async (_ep, id) => {
      calls.push(id);
      if (hang) await new Promise(() => undefined);
    };
    const exec = agent.exec.bind(agent);
    agent.exec = async (ep, req, ...rest) => {
      execs.push([req.cmd, ...req.args].join(' '));
      return exec(ep, req, ...rest);
    };
    await (
      await w.creates.create({ name: 'w', persistent: true }, {})
    ).done;
    calls.length = 0;
    execs.length = 0;
    await w.svc.suspend('w');
    expect(calls).to.have.length(1);
    expect(execs, 'after the identity, one exec that flushes the guest').to.deep.equal(['sync']);
    expect(calls[0]).to.include({ hostname: 'w' });
    expect(calls[0].machine_id, 'its own identity: no new machine id').to.equal(undefined);
    expect(Math.abs(calls[0].time_ms - Date.now())).to.be.below(5000);
    await w.svc.restore('w');
    await w.svc.pause('w');
    calls.length = 0;
    execs.length = 0;
    await w.svc.suspend('w');
    expect(calls).to.deep.equal([]);
    expect(execs).to.deep.equal([]);
    await w.svc.restore('w');
    hang = true;
    calls.length = 0;
    execs.length = 0;
    const t0 = Date.now();
    await w.svc.suspend('w');
    expect(calls).to.have.length(1);
    expect(execs, 'no exec after an identity that did not answer').to.deep.equal([]);
    expect(Date.now() - t0).to.be.below(4500);
    expect(w.vms.get('w').status).to.equal('suspended');
  });

  it('does not warm a guest before its save where the driver restores none ahead', async () => {
    const w = world();
    const agent = w.container.get<GuestAgent>(GuestAgent);
    const calls: string[] = [];
    agent.setIdentity = async () => void calls.push('identity');
    await (
      await w.creates.create({ name: 'w', persistent: true }, {})
    ).done;
    calls.length = 0;
    await w.svc.suspend('w');
    expect(calls).to.deep.equal([]);
  });

  it("offers the warm-up calls to a driver that restores guests ahead of clones: an identity of the guest's own, tried again while unreachable, then an exec of true", async () => {
    const hv = new InMemoryHypervisor({ bootDelayMs: 5 });
    let warm: GuestWarmUpCalls | undefined;
    Object.assign(hv, { cloneReady: () => undefined, warmWith: (w: GuestWarmUpCalls | undefined) => void (warm = w) });
    const w = world({}, undefined, hv);
    expect(warm, 'registered').to.not.equal(undefined);
    const agent = w.container.get<GuestAgent>(GuestAgent);
    const calls: [number, GuestIdentity][] = [];
    const execs: string[] = [];
    let refusals = 2;
    agent.setIdentity = async (ep, id) => {
      if (refusals-- > 0) throw new AgentUnavailableError('connection refused');
      calls.push([ep.port, id]);
    };
    agent.exec = async (_ep, req) => {
      execs.push([req.cmd, ...req.args].join(' '));
      return { stdout: '', stderr: '', exit_code: 0 } as Awaited<ReturnType<GuestAgent['exec']>>;
    };
    const ep = { host: '127.0.0.1', port: 4242 };
    await warm!.firstAnswer(ep, 'spare-0a1b2c3d');
    expect(calls).to.have.length(1);
    expect(calls[0][0]).to.equal(4242);
    expect(calls[0][1]).to.include({ hostname: 'spare-0a1b2c3d' });
    expect(calls[0][1].machine_id, 'a machine id of its own, as a clone gets').to.match(/^[0-9a-f]{32}$/);
    expect(Math.abs(calls[0][1].time_ms - Date.now())).to.be.below(5000);
    expect(execs, 'the command comes apart').to.deep.equal([]);
    await warm!.firstCommand(ep);
    expect(execs).to.deep.equal(['true']);
    // An image without `true` answers the exec with an error: the path was taken all the same.
    agent.exec = async () => {
      throw new InvalidArgumentError('no such file: true');
    };
    await warm!.firstCommand(ep);
    agent.exec = async () => {
      throw new AgentUnavailableError('connection reset');
    };
    expect(await warm!.firstCommand(ep).catch((e: Error) => e.message)).to.equal('connection reset');
    // A guest that answers the identity with an error is not tried again: the adapter stops that spare.
    agent.setIdentity = async () => {
      throw new AgentFailureError('agent answered 500');
    };
    expect(await warm!.firstAnswer(ep, 'spare-0a1b2c3d').catch((e: Error) => e.message)).to.match(/500/);
  });
});
