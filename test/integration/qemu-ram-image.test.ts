import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { QemuHypervisor } from '../../src/adapters/hypervisor/qemu/qemu-hypervisor.js';
import { readSaved } from '../../src/adapters/hypervisor/qemu/saved-state.js';
import { alive } from '../../src/adapters/hypervisor/qemu/qemu-files.js';
import { toState } from '../../src/adapters/hypervisor/adapter-state.js';
import type { VmHandle } from '../../src/ports/hypervisor.js';
import { tempDir } from '../helpers/daemon.js';
import { installFakeQemu, qemuOn, type FakeQemu } from '../helpers/fake-qemu.js';

/** What a suspend leaves of its saved state in a VM directory. */
const savedFiles = (dir: string) =>
  readdirSync(dir)
    .filter((n) => /\.(mig|ram|dev|state|tmp)$/.test(n))
    .sort();

describe('QEMU suspend: the saved state made a RAM image, and what is left when that fails', function () {
  this.timeout(30_000);
  let q: FakeQemu;
  let hv: QemuHypervisor;

  beforeEach(() => {
    q = installFakeQemu(tempDir('svc-ram-image-'));
    hv = qemuOn(q);
  });
  afterEach(() => hv.release());

  const opt = (args: string[], flag: string) => (args.includes(flag) ? args[args.indexOf(flag) + 1] : undefined);

  it('saves the stream, loads it into a second QEMU whose RAM is the image file, keeps that and the device state, and restores by mapping it', async () => {
    const spec = q.vm('s');
    await hv.launch(spec);
    expect(await hv.suspend(spec)).to.deep.equal({ snapshot: true });
    expect(await readSaved(spec.dir)).to.deep.equal({ kind: 'image', base: 'state' });
    expect(savedFiles(spec.dir)).to.deep.equal(['state.dev', 'state.ram']);
    // The memory is what the image's QEMU (start 2) wrote into its shared file; the device state is
    // what it then migrated out, without the RAM.
    expect(readFileSync(join(spec.dir, 'state.ram'), 'utf8')).to.equal('memory of start 2');
    expect(readFileSync(join(spec.dir, 'state.dev'), 'utf8')).to.equal('state of start 2');
    expect(statSync(join(spec.dir, 'state.ram')).mode & 0o077, 'guest memory is private').to.equal(0);
    const maker = q.calls()[1];
    expect(maker).to.include(
      `memory-backend-file,id=pc.ram,size=128M,mem-path=${join(spec.dir, 'state.ram.tmp')},share=on`,
    );
    expect(opt(maker, '-incoming')).to.equal('fd:3');
    expect(opt(maker, '-pidfile')).to.equal(join(spec.dir, 'ram-image.pid'));
    expect(
      q
        .qmp()
        .filter(([n]) => n === 2)
        .map(([, cmd, a]) => (cmd === 'migrate-set-capabilities' ? `${cmd} ${JSON.stringify(a)}` : cmd)),
    ).to.deep.equal([
      'qmp_capabilities',
      'query-migrate', // the stream loaded; never `cont`: the guest does not run
      'migrate-set-parameters',
      'migrate-set-capabilities {"capabilities":[{"capability":"x-ignore-shared","state":true},{"capability":"pause-before-switchover","state":false}]}',
      'migrate',
      'query-migrate',
      'quit',
    ]);
    expect(readdirSync(spec.dir)).to.not.include.members(['ram-image.sock', 'ram-image.pid']);

    const h = await hv.launch(spec, { restore: true });
    expect(h.restored_from_snapshot).to.equal(true);
    const restore = q.calls()[2];
    expect(restore).to.include(
      `memory-backend-file,id=pc.ram,size=128M,mem-path=${join(spec.dir, 'state.ram')},share=off`,
    );
    expect(opt(restore, '-incoming')).to.equal('defer');
    expect(
      q
        .qmp()
        .filter(([n]) => n === 3)
        .map(([, cmd, a]) => (cmd.startsWith('migrate') ? `${cmd} ${JSON.stringify(a)}` : cmd))
        .slice(1, 4),
    ).to.deep.equal([
      'migrate-set-capabilities {"capabilities":[{"capability":"x-ignore-shared","state":true}]}',
      'migrate-incoming {"uri":"fd:3"}',
      'query-migrate',
    ]);
    expect(savedFiles(spec.dir), 'restored: the saved state no longer matches the disk').to.deep.equal([]);
    await hv.kill(spec);
  });

  it('makes the image in a staging folder on a memory filesystem and copies it beside the VM; sweeps what a crashed daemon left there', async () => {
    const root = tempDir('svc-ram-staging-');
    // A crashed daemon's folder of this data dir's tag, and another data dir's: only the first goes.
    mkdirSync(join(root, 'svc-ram-t1-left'));
    writeFileSync(join(root, 'svc-ram-t1-left', 'x.ram.tmp'), 'old memory');
    mkdirSync(join(root, 'svc-ram-t2-other'));
    const staged = qemuOn(q, { ramStaging: { root, tag: 't1' } });
    const spec = q.vm('st');
    try {
      await staged.launch(spec);
      expect(await staged.suspend(spec)).to.deep.equal({ snapshot: true });
      const ramFile = q
        .calls()[1]
        .find((a) => a.startsWith('memory-backend-file'))!
        .split(',')
        .find((x) => x.startsWith('mem-path='))!
        .slice('mem-path='.length);
      expect(ramFile.startsWith(`${root}/svc-ram-t1-`), ramFile).to.equal(true);
      expect(ramFile.endsWith('.ram.tmp')).to.equal(true);
      expect(readdirSync(root).sort()).to.have.length(2).and.to.include('svc-ram-t2-other');
      const mine = readdirSync(root).find((n) => n.startsWith('svc-ram-t1-'))!;
      expect(mine).to.not.equal('svc-ram-t1-left');
      expect(statSync(join(root, mine)).mode & 0o777, 'the folder is private').to.equal(0o700);
      expect(readdirSync(join(root, mine)), 'the staged file is gone once copied').to.deep.equal([]);
      // What QEMU wrote there is the image beside the VM, as private as ever.
      expect(savedFiles(spec.dir)).to.deep.equal(['state.dev', 'state.ram']);
      expect(readFileSync(join(spec.dir, 'state.ram'), 'utf8')).to.equal('memory of start 2');
      expect(statSync(join(spec.dir, 'state.ram')).mode & 0o077).to.equal(0);
      const h = await staged.launch(spec, { restore: true });
      expect(h.restored_from_snapshot).to.equal(true);
      expect(q.calls()[2]).to.include(
        `memory-backend-file,id=pc.ram,size=128M,mem-path=${join(spec.dir, 'state.ram')},share=off`,
      );
      await staged.kill(spec);
    } finally {
      await staged.release();
    }
    expect(readdirSync(root), 'its folder goes with the daemon').to.deep.equal(['svc-ram-t2-other']);
  });

  it('makes the image with a second QEMU when the first dies loading the stream', async () => {
    const spec = q.vm('r');
    await hv.launch(spec);
    q.failing({ 2: 'qemu-system-x86_64: load of migration failed: Input/output error' });
    expect(await hv.suspend(spec)).to.deep.equal({ snapshot: true });
    expect(await readSaved(spec.dir)).to.deep.equal({ kind: 'image', base: 'state' });
    expect(savedFiles(spec.dir)).to.deep.equal(['state.dev', 'state.ram']);
    expect(readFileSync(join(spec.dir, 'state.ram'), 'utf8')).to.equal('memory of start 3');
    expect(q.calls()).to.have.length(3);
    await hv.kill(spec);
  });

  it('keeps the stream when no try makes the image, and restores from it', async () => {
    const spec = q.vm('f');
    await hv.launch(spec);
    const says = 'qemu-system-x86_64: Unknown savevm section or instance';
    q.failing({ 2: says, 3: says });
    expect(await hv.suspend(spec)).to.deep.equal({ snapshot: true });
    expect(await readSaved(spec.dir)).to.deep.equal({ kind: 'stream', file: 'state.mig' });
    expect(savedFiles(spec.dir), 'nothing half-made is left').to.deep.equal(['state.mig']);
    expect(readFileSync(join(spec.dir, 'state.mig'), 'utf8')).to.equal('state of start 1');
    expect(q.calls(), 'two tries, then no more').to.have.length(3);
    const h = await hv.launch(spec, { restore: true });
    expect(h.restored_from_snapshot).to.equal(true);
    expect(opt(q.calls()[3], '-incoming')).to.equal('fd:3');
    expect(q.calls()[3].some((a) => a.startsWith('memory-backend-file'))).to.equal(false);
    await hv.kill(spec);
  });

  it('keeps the stream of a suspend for a move: the other node loads it once', async () => {
    const spec = q.vm('mv');
    await hv.launch(spec);
    expect(await hv.suspend(spec, { forMove: true })).to.deep.equal({ snapshot: true });
    expect(await readSaved(spec.dir)).to.deep.equal({ kind: 'stream', file: 'state.mig' });
    expect(savedFiles(spec.dir)).to.deep.equal(['state.mig']);
    expect(q.calls(), 'no QEMU made an image').to.have.length(1);
    await hv.kill(spec);
  });

  it('keeps streams with qemu.ram_images: false', async () => {
    const streams = qemuOn(q, { ramImages: false });
    const spec = q.vm('o');
    await streams.launch(spec);
    try {
      expect(await streams.suspend(spec)).to.deep.equal({ snapshot: true });
    } finally {
      await streams.release();
    }
    expect(savedFiles(spec.dir)).to.deep.equal(['state.mig']);
    expect(q.calls()).to.have.length(1);
  });

  it('kills an image maker a crashed daemon left, found by its pidfile, when the VM is killed or re-attached; never a pid that is not one', async () => {
    const spec = q.vm('m');
    // Stand-ins: a maker's command line names the VM's disk; a process that took a recycled pid does not.
    const idle = (...args: string[]) =>
      spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', ...args], { stdio: 'ignore' });
    /** Did `c` end within 5 s? */
    const ended = (c: ChildProcess) =>
      new Promise<boolean>((r) => {
        if (c.exitCode !== null || c.signalCode !== null) return r(true);
        const t = setTimeout(() => r(false), 5000);
        c.once('exit', () => {
          clearTimeout(t);
          r(true);
        });
      });
    const disk = join(spec.dir, 'disk.qcow2');
    const kids = [idle(), idle(disk), idle(disk)];
    const [other, first, second] = kids;
    try {
      writeFileSync(join(spec.dir, 'ram-image.pid'), String(other.pid));
      await hv.kill(spec);
      expect(alive(other.pid!), 'not a maker of this vm: left alone').to.equal(true);

      writeFileSync(join(spec.dir, 'ram-image.pid'), String(first.pid));
      await hv.kill(spec);
      expect(await ended(first), 'killed with the vm').to.equal(true);

      writeFileSync(join(spec.dir, 'ram-image.pid'), String(second.pid));
      const gone: VmHandle = {
        ip: '10.0.2.15',
        ssh_port: 0,
        agent_port: 0,
        agent_cid: 0,
        pid: 0,
        forwards: [],
        restored_from_snapshot: false,
        state: toState({}),
      };
      expect(await hv.reattach(spec, gone)).to.equal(null);
      expect(await ended(second), 'killed at re-attach').to.equal(true);
    } finally {
      for (const k of kids) k.kill('SIGKILL');
    }
  });
});
