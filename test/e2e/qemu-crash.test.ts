import { expect } from 'chai';
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildConfig } from '../../src/app/config.js';
import { DRIVER_SECTIONS } from '../../src/adapters/hypervisor/drivers.js';
import { startDaemon } from '../../src/main.js';
import type { Failpoint } from '../../src/ports/failpoints.js';
import { SilentLogger } from '../fakes/fakes.js';
import { call, type Target } from '../helpers/http.js';
import { guestSh, tempDir } from '../helpers/daemon.js';
import { spawnSvcd } from '../helpers/svcd-process.js';
import { ensureImage, qemuProcesses, everyQemuUnder } from './image.js';
import { ensureSeed, seeded, type SeedShape } from './snapshot-seeds.js';

const CRASH_SHAPE: SeedShape = { kind: 'minimal', memory_mb: 384 };

/**
 * The configuration of the daemons (one killed, one started after it) over `dir`. Their creates
 * restore the seeded snapshot of the minimal image (as a user's daemon restores one by default);
 * a VM with a host folder, a start and a cold boot of a half-made VM boot.
 */
function daemonConfig(dir: string) {
  seeded([CRASH_SHAPE], dir);
  return {
    data_dir: join(dir, 'data'),
    socket: join(dir, 'svc.sock'),
    api: '',
    hypervisor: 'qemu',
    images_dir: ensureImage(),
    image: 'minimal',
    memory_mb: 384,
    test_mode: true,
    log_level: 'warn',
    sandbox_metrics_enabled: false,
    create_from_snapshot: true,
    ready_timeout: '180s',
  };
}

/** The QEMU steps of the crash matrix: after a SIGKILL of the daemon, no QEMU runs without a record that holds it. */
describe('crash matrix on QEMU: no QEMU left without a record, nothing half-made booted', function () {
  this.timeout(300_000);
  before(() => ensureSeed(CRASH_SHAPE));
  const vm = `crash${process.pid % 10_000}`;
  const tpl = `${vm}-tpl`;
  /** `settles`: the status the VM must have after the restart, where only one is right. */
  const cases: { point: Failpoint; run: (t: Target) => Promise<unknown>; settles?: string }[] = [
    { point: 'create.disk', run: (t) => call(t, 'POST', '/vms', { name: vm, persistent: true }) },
    { point: 'create.launched', run: (t) => call(t, 'POST', '/vms', { name: vm, persistent: true }) },
    {
      point: 'clone.copied',
      run: async (t) => {
        expect((await call(t, 'POST', '/vms', { name: tpl, persistent: true })).status).to.equal(201);
        expect((await call(t, 'POST', `/vms/${tpl}/suspend`)).status).to.equal(200);
        return call(t, 'POST', `/vms/${tpl}/clone`, { name: vm, persistent: true });
      },
    },
    {
      point: 'restore.launched',
      run: async (t) => {
        expect((await call(t, 'POST', '/vms', { name: vm, persistent: true })).status).to.equal(201);
        expect((await call(t, 'POST', `/vms/${vm}/suspend`)).status).to.equal(200);
        return call(t, 'POST', `/vms/${vm}/restore`);
      },
    },
    {
      point: 'shutdown.stopped',
      run: async (t) => {
        expect((await call(t, 'POST', '/vms', { name: vm, persistent: true })).status).to.equal(201);
        return call(t, 'POST', `/vms/${vm}/shutdown`);
      },
    },
    {
      point: 'suspend.saving',
      run: async (t) => {
        expect((await call(t, 'POST', '/vms', { name: vm, persistent: true })).status).to.equal(201);
        return call(t, 'POST', `/vms/${vm}/suspend`);
      },
    },
    {
      // Inside the adapter: a second QEMU has loaded the stream to make a RAM image of it. Left
      // behind, it would hold the guest's memory and the disk's lock, and the VM could not start.
      point: 'suspend.image',
      run: async (t) => {
        expect((await call(t, 'POST', '/vms', { name: vm, persistent: true })).status).to.equal(201);
        return call(t, 'POST', `/vms/${vm}/suspend`);
      },
      // The stream was saved whole before the maker started: the VM is suspended, and restores.
      settles: 'suspended',
    },
    {
      point: 'delete.destroyed',
      run: async (t) => {
        expect((await call(t, 'POST', '/vms', { name: vm, persistent: true })).status).to.equal(201);
        return call(t, 'DELETE', `/vms/${vm}`);
      },
    },
  ];
  for (const c of cases) {
    it(`dies at ${c.point}; a restarted daemon holds or removes every QEMU, and the VM works again`, async () => {
      const dir = tempDir('svc-qcrash-');
      const raw = daemonConfig(dir);
      const child = await spawnSvcd(dir, raw, { failpoint: c.point });
      const t: Target = { socketPath: raw.socket };
      await c.run(t).catch(() => undefined);
      expect(await child.exited, child.stderr()).to.equal('SIGKILL');

      const d = await startDaemon(buildConfig(raw, {}, undefined, DRIVER_SECTIONS), { logger: new SilentLogger() });
      try {
        const rec = await call(t, 'GET', `/vms/${vm}`);
        const procs = qemuProcesses(raw.data_dir, [vm]);
        if (rec.status === 404) {
          expect(procs, 'no QEMU without a record').to.deep.equal([]);
          expect(existsSync(join(raw.data_dir, 'vms', vm))).to.equal(false);
        } else {
          expect(['running', 'error', 'stopped', 'suspended'], c.point).to.include(rec.json.status);
          if (c.settles) expect(rec.json.status, c.point).to.equal(c.settles);
          // a record that says running holds its QEMU (re-attached); any other holds none
          expect(procs.length, `${rec.json.status}: ${procs.join('; ')}`).to.equal(
            rec.json.status === 'running' ? 1 : 0,
          );
          const again: Record<string, string> = { error: 'start', stopped: 'start', suspended: 'restore' };
          if (again[rec.json.status]) {
            const r = await call(t, 'POST', `/vms/${vm}/${again[rec.json.status]}`);
            expect(r.status, r.text).to.equal(200);
          }
        }
        expect(qemuProcesses(raw.data_dir, [tpl]), 'the template holds no QEMU').to.deep.equal([]);
        if ((await call(t, 'GET', `/vms/${vm}`)).status === 404)
          expect((await call(t, 'POST', '/vms', { name: vm, persistent: true })).status).to.equal(201);
        const r = await call(t, 'POST', `/vms/${vm}/exec?cmd=hostname`);
        expect(r.json?.stdout, r.text).to.equal(`${vm}\n`);
        expect((await call(t, 'DELETE', `/vms/${vm}`)).status).to.equal(200);
        await call(t, 'DELETE', `/vms/${tpl}`);
        expect(qemuProcesses(raw.data_dir, [vm, tpl])).to.deep.equal([]);
        expect(readdirSync(join(raw.data_dir, 'vms'))).to.deep.equal([]);
      } finally {
        await call(t, 'DELETE', `/vms/${vm}`).catch(() => undefined);
        await call(t, 'DELETE', `/vms/${tpl}`).catch(() => undefined);
        await d.stop();
      }
      // nor one the killed daemon started ahead for the snapshot's next copy
      expect(everyQemuUnder(raw.data_dir), 'no QEMU left').to.deep.equal([]);
    });
  }

  /**
   * A daemon killed in a save of a VM with a host folder and a running process, its guest stopped
   * and without its folder (let go of, unplugged): in a fork's capture, waiting in QEMU's pause
   * before the switch-over, then in a suspend's stream; then in the restore of its saved state,
   * before the woken guest mounted its folder. Each time the restarted daemon has the guest run on
   * with both, and it forks (then suspends) as any other.
   */
  it('dies in the saves and the restore of a vm with a host folder (fork.switchover, suspend.streaming, restore.running); the restarted daemon has its guest run on, with its folder and process', async () => {
    const dir = tempDir('svc-qcrash-');
    const host = tempDir('svc-qcrash-share-');
    writeFileSync(join(host, 'f.txt'), 'from the host');
    const raw = { ...daemonConfig(dir), mount_dirs: [host] };
    const t: Target = { socketPath: raw.socket };
    const sh = (script: string, on = vm) => guestSh({ call: (m, p, b, h) => call(t, m, p, b, h) }, on, script);
    const fork = `${vm}-f`;
    let pid = '';
    const both = () => `cat /mnt/share/f.txt; kill -0 ${pid} && echo alive`;
    /** A daemon armed at `point` is killed in `cut`; one started after it is handed to `then`. */
    const crash = async (point: Failpoint, cut: () => Promise<unknown>, then: () => Promise<void>) => {
      const child = await spawnSvcd(dir, raw, { failpoint: point });
      await cut().catch(() => undefined);
      expect(await child.exited, child.stderr()).to.equal('SIGKILL');
      const d = await startDaemon(buildConfig(raw, {}, undefined, DRIVER_SECTIONS), { logger: new SilentLogger() });
      try {
        expect((await call(t, 'GET', `/vms/${vm}`)).json.status, point).to.equal('running');
        expect(qemuProcesses(raw.data_dir, [vm]), point).to.have.length(1);
        expect((await sh(both())).stdout, point).to.equal('from the hostalive\n');
        await then();
      } finally {
        await d.stop();
      }
    };
    try {
      await crash(
        'fork.switchover',
        async () => {
          const made = await call(t, 'POST', '/vms', {
            name: vm,
            persistent: true,
            mounts: [{ host, guest: '/mnt/share' }],
          });
          expect(made.status, made.text).to.equal(201);
          pid = (await sh('sleep 1000 >/dev/null 2>&1 & echo $!')).stdout.trim();
          return call(t, 'POST', `/vms/${vm}/fork`, { names: [fork] });
        },
        async () => {
          const f = await call(t, 'POST', `/vms/${vm}/fork`, { names: [fork] });
          expect(f.status, f.text).to.equal(201);
          expect((await sh(both(), fork)).stdout).to.equal('from the hostalive\n');
          expect((await call(t, 'DELETE', `/vms/${fork}`)).status).to.equal(200);
        },
      );
      await crash(
        'suspend.streaming',
        () => call(t, 'POST', `/vms/${vm}/suspend`),
        async () => {
          const s = await call(t, 'POST', `/vms/${vm}/suspend`);
          expect(s.json.message, s.text).to.equal(`vm ${vm} suspended`);
        },
      );
      // Its restore says running before the woken guest has mounted its folder: the process is the
      // saved one, and the folder is given at the next start.
      await crash(
        'restore.running',
        () => call(t, 'POST', `/vms/${vm}/restore`),
        async () => {
          expect((await call(t, 'DELETE', `/vms/${vm}`)).status).to.equal(200);
        },
      );
    } finally {
      for (const left of qemuProcesses(raw.data_dir, [vm, fork])) process.kill(Number(left.split(' ')[0]), 'SIGKILL');
    }
  });
});
