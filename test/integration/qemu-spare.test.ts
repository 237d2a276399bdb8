import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { QemuHypervisor } from '../../src/adapters/hypervisor/qemu/qemu-hypervisor.js';
import { alive } from '../../src/adapters/hypervisor/qemu/qemu-files.js';
import type { VmSpec } from '../../src/ports/hypervisor.js';
import { tempDir } from '../helpers/daemon.js';
import { installFakeQemu, qemuOn, type FakeQemu } from '../helpers/fake-qemu.js';
import { poll } from '../helpers/wait.js';

/** A spare's directory in a template's. */
const sparesIn = (dir: string) => readdirSync(dir).filter((n) => /^spare-[0-9a-f]{8}$/.test(n));
const cmdline = (pid: number) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
const waitGone = async (pid: number) => {
  await poll(() => !alive(pid), { ms: 15_000 });
  return !alive(pid);
};

describe('QEMU clones: a spare QEMU started ahead for the next clone of a template', function () {
  this.timeout(30_000);
  let q: FakeQemu;
  let hv: QemuHypervisor;
  let tpl: VmSpec;
  const opt = (args: string[], flag: string) => (args.includes(flag) ? args[args.indexOf(flag) + 1] : undefined);
  /** A clone's directory and spec, made by the store before a clone (empty). */
  const fresh = (name: string): VmSpec => {
    const spec = q.vm(name);
    rmSync(join(spec.dir, 'disk.qcow2'));
    return spec;
  };

  beforeEach(async () => {
    q = installFakeQemu(tempDir('svc-spare-'));
    hv = qemuOn(q);
    tpl = q.vm('tpl');
    // The size the specs ask for (a clone's disk is its template's): no launch has a disk to grow.
    execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', join(tpl.dir, 'disk.qcow2'), `${tpl.disk_gb}G`]);
    await hv.launch(tpl); // start 1
    await hv.suspend(tpl); // start 2 makes its RAM image
  });
  afterEach(() => hv.release());

  it('starts one after the first clone, held before its load; the next clone takes it over with its files, its own seed and forwards', async () => {
    const c1 = fresh('c1');
    expect(await hv.clone(tpl, c1)).to.deep.equal({ snapshot: true });
    await hv.launch(c1, { restore: true }); // start 3: no spare yet
    await hv.sparesSettled();
    expect(q.calls(), 'nothing beside the clone before its first answer').to.have.length(3);
    hv.cloneReady(c1); // the next spare starts once the clone answered
    await hv.sparesSettled();
    expect(q.calls()).to.have.length(4);
    const spareArgs = q.calls()[3];
    const [spareDir] = sparesIn(tpl.dir);
    expect(opt(spareArgs, '-name')).to.equal(`svc-${spareDir},process=svc-${spareDir}`);
    expect(opt(spareArgs, '-incoming')).to.equal('defer');
    expect(spareArgs.find((a) => a.startsWith('memory-backend-file')))
      .to.include(`mem-path=${join(tpl.dir, spareDir)}/base-`)
      .and.include(',share=off');
    expect(
      q
        .qmp()
        .filter(([n]) => n === 4)
        .map(([, c]) => c),
      'held: nothing loaded yet',
    ).to.deep.equal(['qmp_capabilities']);

    const c2 = fresh('c2');
    expect(await hv.clone(tpl, c2)).to.deep.equal({ snapshot: true });
    const h = await hv.launch(
      { ...c2, forwards: [{ host_port: 0, guest_port: 8080, proto: 'tcp' }] },
      { restore: true },
    );
    expect(h.restored_from_snapshot).to.equal(true);
    expect(cmdline(h.pid!)).to.include(`svc-${spareDir},process=svc-${spareDir}`);
    expect(opt(spareArgs, '-netdev')).to.include(`hostfwd=tcp:127.0.0.1:${h.agent_port}-:7475`);
    expect(h.forwards).to.have.length(1);
    expect(
      q
        .qmp()
        .filter(([n]) => n === 4)
        .map(([, c, a]) => (c === 'human-monitor-command' ? (a as { 'command-line': string })['command-line'] : c)),
    ).to.deep.equal([
      'qmp_capabilities',
      'migrate-set-capabilities',
      'migrate-incoming',
      'query-migrate',
      'cont',
      `hostfwd_add net0 tcp:127.0.0.1:${h.forwards[0].host_port}-:8080`,
    ]);
    // Its files are the clone's now; the seed is the clone's own; the saved state is spent.
    const files = readdirSync(c2.dir);
    expect(files).to.include.members(['disk.qcow2', 'seed.iso', 'qemu.pid', 'qmp.sock', 'qemu.log', 'spare.json']);
    expect(files.filter((n) => /\.(ram|dev|marker)$/.test(n))).to.deep.equal([]);
    expect(readFileSync(join(c2.dir, 'seed.iso'), 'latin1')).to.include('local-hostname: c2');
    expect(readFileSync(join(c2.dir, 'qemu.pid'), 'utf8')).to.equal(String(h.pid));
    // The clone, once up, started the next spare (start 5) in a new directory.
    hv.cloneReady(c2);
    await hv.sparesSettled();
    expect(q.calls()).to.have.length(5);
    expect(sparesIn(tpl.dir)).to.have.length(1).and.not.include(spareDir);

    // A daemon that restarts finds the clone's QEMU by what its command line shows, and one that
    // crashed before recording it kills it by the pidfile in the clone's directory.
    await hv.release();
    const hv2 = qemuOn(q);
    try {
      expect(await hv2.reattach(c2, h), 're-attached').to.not.equal(null);
      await hv2.release();
      await qemuOn(q).kill(c2);
      expect(await waitGone(h.pid!)).to.equal(true);
      await hv2.kill(c1);
    } finally {
      await hv2.release();
    }
  });

  it('starts none with spares off (clone_spares: false)', async () => {
    await hv.release();
    hv = qemuOn(q, { spares: false });
    for (const name of ['c1', 'c2']) {
      const c = fresh(name);
      await hv.clone(tpl, c);
      const h = await hv.launch(c, { restore: true });
      hv.cloneReady(c);
      await hv.sparesSettled();
      expect(cmdline(h.pid!)).to.include(`svc-${name},process=svc-${name}`);
      await hv.kill(c);
    }
    expect(q.calls()).to.have.length(4);
    expect(sparesIn(tpl.dir)).to.deep.equal([]);
  });

  it("stops the spare when its template runs again, goes, or the daemon stops; a crashed daemon's is swept", async () => {
    const c1 = fresh('c1');
    await hv.clone(tpl, c1);
    await hv.launch(c1, { restore: true });
    hv.cloneReady(c1);
    await hv.sparesSettled();
    const pid = () => Number(readFileSync(join(tpl.dir, sparesIn(tpl.dir)[0], 'qemu.pid'), 'utf8'));
    let p = pid();
    expect(alive(p)).to.equal(true);
    await hv.launch(tpl, { restore: true });
    expect(await waitGone(p), 'the template runs: its spare is stale').to.equal(true);
    expect(sparesIn(tpl.dir)).to.deep.equal([]);
    await hv.suspend(tpl);

    // The next clone does not find one, makes its own files, and starts the next spare.
    const c2 = fresh('c2');
    await hv.clone(tpl, c2);
    const h2 = await hv.launch(c2, { restore: true });
    hv.cloneReady(c2);
    expect(cmdline(h2.pid!)).to.include('svc-c2,process=svc-c2');
    await hv.sparesSettled();
    p = pid();
    await hv.release();
    expect(await waitGone(p), 'the daemon stopped').to.equal(true);

    // A spare a crashed daemon left (here: one whose daemon forgot it) is stopped at the next clone or delete.
    hv = qemuOn(q);
    const c3 = fresh('c3');
    await hv.clone(tpl, c3);
    await hv.launch(c3, { restore: true });
    hv.cloneReady(c3);
    await hv.sparesSettled();
    p = pid();
    const forgetful = qemuOn(q);
    await forgetful.destroy(tpl);
    expect(await waitGone(p), 'swept').to.equal(true);
    expect(existsSync(join(tpl.dir, 'disk.qcow2'))).to.equal(false);
    expect(sparesIn(tpl.dir)).to.deep.equal([]);
    for (const c of [c1, c2, c3]) await hv.kill(c);
  });

  describe('warmed (VmDisks.warmSpares)', () => {
    /** The monitor commands QEMU number `n` got, `hostfwd_add` shown with its arguments. */
    const qmpOf = (n: number) =>
      q
        .qmp()
        .filter(([i]) => i === n)
        .map(([, c, a]) => (c === 'human-monitor-command' ? (a as { 'command-line': string })['command-line'] : c));
    /** c1 cloned and up (start 3), its spare started (start 4). */
    const firstClone = async () => {
      const c1 = fresh('c1');
      await hv.clone(tpl, c1);
      await hv.launch(c1, { restore: true });
      hv.cloneReady(c1);
      return c1;
    };

    it("restores the spare's guest, runs it through the warm-up under its own name and pauses it; the clone only continues it", async () => {
      const calls: { port: number; host: string; name: string }[] = [];
      const commands: number[] = [];
      hv.warmWith({
        firstAnswer: async (ep, name) => void calls.push({ host: ep.host, port: ep.port, name }),
        firstCommand: async (ep) => void commands.push(ep.port),
      });
      const c1 = await firstClone();
      await hv.sparesSettled();
      const [dir] = sparesIn(tpl.dir);
      expect(calls).to.have.length(1);
      expect(calls[0]).to.deep.include({ host: '127.0.0.1', name: dir });
      expect(commands).to.deep.equal([calls[0].port]);
      expect(opt(q.calls()[3], '-netdev')).to.include(`hostfwd=tcp:127.0.0.1:${calls[0].port}-:7475`);
      expect(qmpOf(4)).to.deep.equal([
        'qmp_capabilities',
        'migrate-set-capabilities',
        'migrate-incoming',
        'query-migrate',
        'cont',
        'stop',
      ]);

      const c2 = fresh('c2');
      await hv.clone(tpl, c2);
      const h = await hv.launch(
        { ...c2, forwards: [{ host_port: 0, guest_port: 8080, proto: 'tcp' }] },
        { restore: true },
      );
      expect(h.restored_from_snapshot).to.equal(true);
      expect(h.agent_port).to.equal(calls[0].port);
      expect(cmdline(h.pid!)).to.include(`svc-${dir},process=svc-${dir}`);
      expect(qmpOf(4).slice(6), 'nothing loaded again: continued, forwards added').to.deep.equal([
        'cont',
        `hostfwd_add net0 tcp:127.0.0.1:${h.forwards[0].host_port}-:8080`,
      ]);
      for (const c of [c1, c2]) await hv.kill(c);
    });

    for (const step of ['firstAnswer', 'firstCommand'] as const) {
      it(`stops a spare whose warm-up fails (${step}); the next clone starts a QEMU of its own`, async () => {
        const ok = async () => undefined;
        hv.warmWith({ firstAnswer: ok, firstCommand: ok, [step]: () => Promise.reject(new Error('no answer')) });
        const c1 = await firstClone();
        await hv.sparesSettled();
        const spare = q.calls()[3];
        expect(opt(spare, '-name')).to.match(/^svc-spare-/);
        expect(sparesIn(tpl.dir), 'stopped and removed').to.deep.equal([]);
        const c2 = fresh('c2');
        await hv.clone(tpl, c2);
        const h = await hv.launch(c2, { restore: true });
        expect(cmdline(h.pid!)).to.include('svc-c2,process=svc-c2');
        for (const c of [c1, c2]) await hv.kill(c);
      });
    }

    it('gives a clone that comes while the spare starts the spare held: no warm-up beside the clone', async () => {
      let warmed = 0;
      const count = async () => void warmed++;
      hv.warmWith({ firstAnswer: count, firstCommand: count });
      const c1 = await firstClone(); // the spare is starting now
      const c2 = fresh('c2');
      await hv.clone(tpl, c2);
      const h = await hv.launch(c2, { restore: true });
      await hv.sparesSettled();
      expect(cmdline(h.pid!).join(' ')).to.match(/process=svc-spare-[0-9a-f]{8}/);
      expect(warmed).to.equal(0);
      expect(qmpOf(4)).to.deep.equal([
        'qmp_capabilities',
        'migrate-set-capabilities',
        'migrate-incoming',
        'query-migrate',
        'cont',
      ]);
      for (const c of [c1, c2]) await hv.kill(c);
    });

    it('makes a clone that comes during the warm-up wait for its first answer only: the clone takes the guest running, and the rest neither pauses nor stops it', async () => {
      const gate = () => {
        let open = () => {};
        const shut = new Promise<void>((r) => (open = r));
        return { shut, open: () => open() };
      };
      const [answerBegun, answer, command] = [gate(), gate(), gate()];
      let commandDone = false;
      hv.warmWith({
        firstAnswer: async () => {
          answerBegun.open();
          await answer.shut;
        },
        firstCommand: async () => {
          await command.shut;
          commandDone = true;
        },
      });
      const c1 = await firstClone();
      await answerBegun.shut;
      const c2 = fresh('c2');
      let cloned = false;
      const cloning = hv.clone(tpl, c2).then(() => (cloned = true));
      await new Promise((r) => setTimeout(r, 100));
      expect(cloned, 'waits for the first answer').to.equal(false);
      answer.open();
      await cloning;
      expect(commandDone, 'taken before the first command ended').to.equal(false);
      const h = await hv.launch(c2, { restore: true });
      expect(cmdline(h.pid!).join(' ')).to.match(/process=svc-spare-[0-9a-f]{8}/);
      // c2 is up: the template's next spare starts though the old warm-up still runs.
      hv.cloneReady(c2);
      await poll(() => q.calls().length >= 5, { ms: 10_000, every: 20 });
      expect(q.calls(), 'a fifth QEMU, the next spare').to.have.length(5);
      expect(commandDone).to.equal(false);
      command.open();
      await hv.sparesSettled();
      expect(commandDone).to.equal(true);
      expect(qmpOf(4), 'never paused; continued (a no-op on a running guest)').to.deep.equal([
        'qmp_capabilities',
        'migrate-set-capabilities',
        'migrate-incoming',
        'query-migrate',
        'cont',
        'cont',
      ]);
      expect(alive(h.pid!), 'the clone runs on').to.equal(true);
      for (const c of [c1, c2]) await hv.kill(c);
    });
  });
});
