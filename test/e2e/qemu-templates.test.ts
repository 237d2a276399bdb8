import { expect } from 'chai';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { guestSh, startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { SilentLogger } from '../fakes/fakes.js';
import { call, ndjson } from '../helpers/http.js';
import { QemuHypervisor } from '../../src/adapters/hypervisor/qemu/qemu-hypervisor.js';
import { ensureImage, qemuOfVm, qemuProcesses, qemuUnder, waitingSpares } from './image.js';
import { startSeededDaemon } from './snapshot-seeds.js';
import { poll } from '../helpers/wait.js';

/**
 * Deletes every VM and pool member and stops the daemon. A refill still in flight would add a
 * member after the listing, so it is let finish first; the template goes with the VMs, so nothing
 * refills behind the cleanup.
 */
async function removeAll(d: TestDaemon): Promise<void> {
  await d.daemon.poolSettled();
  for (const i of (await d.call('GET', '/vms')).json as { name: string }[]) await d.call('DELETE', `/vms/${i.name}`);
  await d.daemon.poolSettled();
  const members = (await d.call('GET', '/pool')).json.members as { name: string }[];
  for (const m of members) await d.call('DELETE', `/vms/${m.name}`);
  await d.stop();
  expect(
    qemuProcesses(d.config.data_dir, ['tpl', 'rtpl', 'c1', 'c2', 'q1', 'q2', 'q3', ...members.map((m) => m.name)]),
  ).to.deep.equal([]);
  expect(qemuUnder(d.config.data_dir), 'clones that took a spare, and spares, are gone too').to.deep.equal([]);
}

/** The disk chain's bound this daemon runs with (`qemu.max_disk_layers`). */
const MAX_LAYERS = 2;

describe('svcd with QEMU: templates, clones and the warm pool', function () {
  this.timeout(240_000);
  let d: TestDaemon;
  const log = new SilentLogger();
  const sh = async (vm: string, script: string) => (await guestSh(d, vm, script)).stdout.trim();

  const dirOf = (vm: string) => join(d.config.data_dir, 'vms', vm);
  /** The frozen layers a VM's directory links (disk-layers.ts). */
  const layersIn = (vm: string) => readdirSync(dirOf(vm)).filter((n) => /^base-[0-9a-f]{16}\.qcow2$/.test(n));

  /**
   * The QEMU started for the next clone of `template` once a clone of it ran, once its start and
   * warm-up are over (a clone that finds none ready starts its own QEMU). A spare runs niced: on a
   * host busy with other tests its warm-up takes many times its 1-2 s.
   */
  const spareOf = async (template: string) => {
    const find = () => waitingSpares(d.config.data_dir).find((l) => l.includes(`${dirOf(template)}/spare-`));
    await poll(() => find() !== undefined, { ms: 30_000, every: 100 });
    await d.daemon.container.get(QemuHypervisor).sparesSettled();
    return find() ?? '';
  };

  before(async () => {
    d = await startSeededDaemon(
      { kind: 'minimal', memory_mb: 512 },
      {
        warm_pool: { template: 'tpl', size: 2 },
        sandbox_metrics_enabled: false,
        // The fewest rounds the config allows for the flatten test (the default is 8); the rule is the same (docs/config.md).
        qemu: { max_disk_layers: MAX_LAYERS },
      },
      { logger: log },
    );
  });
  after(async () => removeAll(d));

  let tplMachineId = '';

  it('clones a suspended template from its snapshot: own hostname and machine id, the template files, the template untouched', async () => {
    expect((await d.call('POST', '/vms', { name: 'tpl', persistent: true, memory_mb: 384 })).status).to.equal(201);
    await sh('tpl', 'echo from-template > /root/tpl.txt; sync');
    tplMachineId = await sh('tpl', 'cat /etc/machine-id');
    expect((await d.call('POST', '/vms/tpl/suspend')).status).to.equal(200);
    const t0 = Date.now();
    const events = ndjson((await d.call('POST', '/vms?stream=1', { name: 'c1', from: 'tpl' })).text);
    expect(events.at(-1)!.phase, JSON.stringify(events.at(-1))).to.equal('ready');
    expect(events.find((e) => e.phase === 'boot')!.message).to.match(/restoring from the snapshot of template tpl/);
    // Not cold-booted: the guest's uptime goes on from the template's, longer than this create took.
    const uptime = Number(await sh('c1', 'cut -d" " -f1 /proc/uptime'));
    expect(uptime * 1000).to.be.above(Date.now() - t0);
    expect(await sh('c1', 'hostname')).to.equal('c1');
    expect(await sh('c1', 'cat /root/tpl.txt')).to.equal('from-template');
    expect(await sh('c1', 'cat /etc/machine-id')).to.not.equal(tplMachineId);
    expect(Math.abs(Number(await sh('c1', 'date +%s')) - Date.now() / 1000)).to.be.below(5);
    expect((await d.call('GET', '/vms/tpl')).json.status).to.equal('suspended');
  });

  it('runs two clones at once, each answering on its own ports; the second in the QEMU started ahead after the first', async () => {
    // The pool's refills clone tpl too (and would take its spare): let them finish first.
    await d.daemon.poolSettled();
    const spare = await spareOf('tpl');
    expect(spare, 'the first clone started a spare for the next')
      .to.include(`${dirOf('tpl')}/spare-`)
      .and.include('-incoming defer');
    // The spare restored its guest, ran it through an identity of its own and an exec, and paused it.
    const warmed = () =>
      log.lines.filter(
        (l) =>
          l.msg === 'spare qemu warmed and paused for the next clone' &&
          (l.obj as { pid?: number }).pid === Number(spare.split(' ')[0]),
      );
    await poll(() => warmed().length !== 0, { ms: 60_000, every: 100 });
    expect(warmed(), 'the spare was warmed').to.have.length(1);
    const c2 = await d.call('POST', '/vms/tpl/clone', { name: 'c2', persistent: true });
    expect(c2.status, c2.text).to.equal(201);
    expect(log.lines.find((l) => l.msg === 'spawn timing' && (l.obj as { vm?: string }).vm === 'c2')?.obj).to.include({
      spare: 'warm',
    });
    // Nothing of the spare's own name is left in the clone: kernel, /etc/hostname, /etc/hosts; its clock is now.
    expect(await sh('c2', 'hostname; cat /etc/hostname; grep -c spare- /etc/hosts || true')).to.equal('c2\nc2\n0');
    expect(Math.abs(Number(await sh('c2', 'date +%s')) - Date.now() / 1000)).to.be.below(5);
    const c1 = (await d.call('GET', '/vms/c1')).json;
    expect(c2.json.agent_port).to.not.equal(c1.agent_port);
    expect(await sh('c1', 'hostname')).to.equal('c1');
    expect(await sh('c2', 'hostname')).to.equal('c2');
    expect(await sh('c2', 'cat /etc/machine-id'))
      .to.not.equal(tplMachineId)
      .and.not.equal(await sh('c1', 'cat /etc/machine-id'));
    expect(qemuOfVm(d.config.data_dir, 'c1')).to.include('process=svc-c1');
    expect(qemuOfVm(d.config.data_dir, 'c2'), 'c2 runs in the spare').to.equal(spare.slice(spare.indexOf(' ') + 1));
    await sh('c2', 'echo only-c2 > /root/mine');
    expect(await sh('c1', 'cat /root/mine 2>/dev/null || echo absent')).to.equal('absent');
    // Nothing was copied: the template's disk became one frozen layer that both clones link.
    const [layer, ...more] = layersIn('c1');
    expect(more).to.deep.equal([]);
    expect(layersIn('c2')).to.deep.equal([layer]);
    const ino = statSync(join(dirOf('tpl'), layer)).ino;
    for (const vm of ['c1', 'c2']) expect(statSync(join(dirOf(vm), layer)).ino, vm).to.equal(ino);
    expect(statSync(join(dirOf('tpl'), layer)).mode & 0o222, 'a layer is never written').to.equal(0);
    // Nor was the template's memory loaded twice: its saved state became one RAM image that both
    // clones' QEMUs map copy-on-write (ram-image.ts).
    const base = layer.replace('.qcow2', '');
    expect(
      readdirSync(dirOf('tpl'))
        .filter((n) => /\.(ram|dev|state|mig)$/.test(n))
        .sort(),
    ).to.deep.equal([`${base}.dev`, `${base}.ram`]);
    expect(statSync(join(dirOf('tpl'), `${base}.ram`)).mode & 0o222).to.equal(0);
    expect(qemuOfVm(d.config.data_dir, 'c1'))
      .to.include(`mem-path=${join(dirOf('c1'), `${base}.ram`)},share=off`)
      .and.include('-incoming defer');
    // The spare mapped the image from its own directory (a link to the same file) before it was c2's.
    expect(qemuOfVm(d.config.data_dir, 'c2')).to.match(
      new RegExp(`mem-path=${dirOf('tpl')}/spare-[0-9a-f]{8}/${base}\\.ram,share=off`),
    );
    // A clone that took a spare suspends and restores like any VM, though the paths its QEMU was
    // started with are gone: from its own snapshot (the guest's uptime goes on), its changes kept.
    expect((await d.call('POST', '/vms/c2/suspend')).status).to.equal(200);
    const t0 = Date.now();
    expect((await d.call('POST', '/vms/c2/restore')).json.status).to.equal('running');
    expect(Number(await sh('c2', 'cut -d" " -f1 /proc/uptime')) * 1000).to.be.above(Date.now() - t0);
    expect(await sh('c2', 'cat /root/mine')).to.equal('only-c2');
  });

  it('deletes a template that has a live clone; the clone keeps the shared layer, runs, suspends, restores and cold-boots', async () => {
    expect((await d.call('POST', '/vms', { name: 'dt', persistent: true, memory_mb: 384 })).status).to.equal(201);
    await sh('dt', 'echo from-dt > /root/dt.txt; sync');
    expect((await d.call('POST', '/vms/dt/suspend')).status).to.equal(200);
    expect((await d.call('POST', '/vms/dt/clone', { name: 'dc', persistent: true })).status).to.equal(201);
    const [layer] = layersIn('dc');
    expect(await spareOf('dt')).to.include('-incoming defer');
    expect(
      statSync(join(dirOf('dc'), layer)).nlink,
      'dt, dc and the spare dc started for the next clone of dt',
    ).to.equal(3);
    const del = await d.call('DELETE', '/vms/dt');
    expect(del.status, del.text).to.equal(200);
    expect((await d.call('GET', '/vms/dt')).status).to.equal(404);
    expect(existsSync(dirOf('dt'))).to.equal(false);
    // The layer lives on in the clone's directory; the template's spare went with it.
    expect(statSync(join(dirOf('dc'), layer)).nlink).to.equal(1);
    expect(waitingSpares(d.config.data_dir).filter((l) => l.includes(`${dirOf('dt')}/`))).to.deep.equal([]);
    expect(await sh('dc', 'hostname; cat /root/dt.txt')).to.equal('dc\nfrom-dt');
    expect((await d.call('POST', '/vms/dc/suspend')).status).to.equal(200);
    // Its own suspend is a RAM image of its own (the memory it had, shared pages and changes alike).
    expect(
      readdirSync(dirOf('dc'))
        .filter((n) => /\.(ram|dev|state|mig)$/.test(n))
        .sort(),
    ).to.deep.equal(['state.dev', 'state.ram']);
    expect((await d.call('POST', '/vms/dc/restore')).json.status).to.equal('running');
    expect(qemuProcesses(d.config.data_dir, ['dc'])[0]).to.include(
      `mem-path=${join(dirOf('dc'), 'state.ram')},share=off`,
    );
    expect(await sh('dc', 'cat /root/dt.txt')).to.equal('from-dt');
    expect((await d.call('POST', '/vms/dc/shutdown')).status).to.equal(200);
    expect((await d.call('POST', '/vms/dc/start')).json.status).to.equal('running');
    expect(await sh('dc', 'cat /root/dt.txt')).to.equal('from-dt');
    expect((await d.call('DELETE', '/vms/dc')).status).to.equal(200);
    expect(existsSync(dirOf('dc'))).to.equal(false);
    expect(qemuProcesses(d.config.data_dir, ['dt', 'dc'])).to.deep.equal([]);
  });

  it(`flattens a template cloned after ${MAX_LAYERS} changes into one layer; clones from before and after see every change`, async () => {
    expect((await d.call('POST', '/vms', { name: 'ft', persistent: true, memory_mb: 384 })).status).to.equal(201);
    // Each round changes the template, suspends it and clones it: one more frozen layer each time,
    // until the freeze that would make the chain longer than MAX_LAYERS writes it into one.
    for (let i = 0; i <= MAX_LAYERS; i++) {
      await sh('ft', `echo gen-${i} > /root/gen-${i}; sync`);
      expect((await d.call('POST', '/vms/ft/suspend')).status).to.equal(200);
      const c = await d.call('POST', '/vms/ft/clone', { name: `fc${i}`, persistent: true });
      expect(c.status, c.text).to.equal(201);
      expect(layersIn(`fc${i}`), `fc${i}`).to.have.length(i < MAX_LAYERS ? i + 1 : 1);
      if (i < MAX_LAYERS - 1) expect((await d.call('DELETE', `/vms/fc${i}`)).status).to.equal(200);
      expect((await d.call('POST', '/vms/ft/restore')).json.status).to.equal('running');
    }
    const all = (n: number) => Array.from({ length: n }, (_, i) => `gen-${i}`).join('\n');
    const seen = (vm: string) => sh(vm, 'cat /root/gen-*');
    // The clone made after the flatten stands on one layer and sees every change, restored from the
    // saved state that moved with the flattened layer (it runs, it did not cold boot).
    expect(await seen(`fc${MAX_LAYERS}`)).to.equal(all(MAX_LAYERS + 1));
    expect(await sh(`fc${MAX_LAYERS}`, 'hostname')).to.equal(`fc${MAX_LAYERS}`);
    // The template dropped its links to the old layers; the clone made before keeps its chain.
    expect(layersIn('ft')).to.deep.equal(layersIn(`fc${MAX_LAYERS}`));
    const early = `fc${MAX_LAYERS - 1}`;
    expect(layersIn(early)).to.have.length(MAX_LAYERS);
    expect(await seen(early)).to.equal(all(MAX_LAYERS));
    expect((await d.call('POST', `/vms/${early}/shutdown`)).status).to.equal(200);
    expect((await d.call('POST', `/vms/${early}/start`)).json.status).to.equal('running');
    expect(await seen(early)).to.equal(all(MAX_LAYERS));
    expect(await seen('ft')).to.equal(all(MAX_LAYERS + 1));
    for (const vm of ['ft', early, `fc${MAX_LAYERS}`])
      expect((await d.call('DELETE', `/vms/${vm}`)).status).to.equal(200);
    expect(qemuProcesses(d.config.data_dir, ['ft', early, `fc${MAX_LAYERS}`])).to.deep.equal([]);
  });

  it('fills the pool, gives 5 concurrent claims 5 distinct VMs, and refills', async () => {
    await d.restart(); // the pool fills when the daemon starts with its template in place
    await d.daemon.poolSettled();
    expect((await d.call('GET', '/pool')).json.ready).to.equal(2);
    const results = await Promise.all(
      [1, 2, 3, 4, 5].map((i) => d.call('POST', '/vms', { name: `p${i}`, from_pool: true, tags: { i: String(i) } })),
    );
    for (const r of results) expect(r.status, r.text).to.equal(201);
    expect(new Set(results.map((r) => r.json.name)).size).to.equal(5);
    for (let i = 1; i <= 5; i++)
      expect(await sh(`p${i}`, 'hostname; cat /root/tpl.txt')).to.equal(`p${i}\nfrom-template`);
    const claimed = (await d.call('GET', '/activity')).json.events.filter((e: { message?: string }) =>
      /^claimed /.test(e.message ?? ''),
    );
    expect(claimed).to.have.length(2);
    await d.daemon.poolSettled();
    const pool = (await d.call('GET', '/pool')).json;
    expect(pool.ready).to.equal(2);
    for (const i of [1, 2, 3, 4, 5]) await d.call('DELETE', `/vms/p${i}`);
  });

  it('leaves the template as it was', async () => {
    const r = await d.call('POST', '/vms/tpl/restore');
    expect(r.json.status).to.equal('running');
    expect(await sh('tpl', 'hostname; cat /etc/machine-id; cat /root/mine 2>/dev/null || echo absent')).to.equal(
      `tpl\n${tplMachineId}\nabsent`,
    );
  });
});

describe('svcd with QEMU: a warm pool of running members', function () {
  this.timeout(240_000);
  let d: TestDaemon;
  before(async () => {
    d = await startTestDaemon({
      hypervisor: 'qemu',
      images_dir: ensureImage(),
      image: 'minimal',
      warm_pool: { template: 'rtpl', size: 2, running: true },
      sandbox_metrics_enabled: false,
    });
    expect((await d.call('POST', '/vms', { name: 'rtpl', persistent: true, memory_mb: 384 })).status).to.equal(201);
    await d.call('POST', '/vms/rtpl/suspend');
    await d.restart();
    await d.daemon.poolSettled();
  });
  after(async () => removeAll(d));

  it('claims running members: renamed, own identity, forwards added live, and they survive a daemon restart', async () => {
    expect((await d.call('GET', '/pool')).json).to.include({ running: true, ready: 2 });
    const results = await Promise.all(
      [1, 2, 3].map((i) =>
        d.call('POST', '/vms', { name: `q${i}`, from_pool: true, forwards: [{ guest_port: 7475 }] }),
      ),
    );
    for (const r of results) expect(r.status, r.text).to.equal(201);
    for (const r of results) {
      const f = r.json.forwards.find((x: { guest_port: number }) => x.guest_port === 7475);
      const direct = await call({ port: f.host_port }, 'GET', '/health');
      expect(direct.json.hostname).to.equal(r.json.name);
    }
    await d.restart();
    for (const i of [1, 2, 3]) {
      expect((await d.call('GET', `/vms/q${i}`)).json.status).to.equal('running');
      const h = await d.call('POST', `/vms/q${i}/exec?cmd=hostname`);
      expect(h.json.stdout).to.equal(`q${i}\n`);
    }
  });
});
