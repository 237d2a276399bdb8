import { expect } from 'chai';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { DRIVER_SECTIONS } from '../../src/adapters/hypervisor/drivers.js';
import { buildConfig } from '../../src/app/config.js';
import { startDaemon } from '../../src/main.js';
import type { Failpoint } from '../../src/ports/failpoints.js';
import { SilentLogger } from '../fakes/fakes.js';
import { call, type Target } from '../helpers/http.js';
import { tempDir } from '../helpers/daemon.js';
import { spawnSvcd } from '../helpers/svcd-process.js';
import { poll } from '../helpers/wait.js';

/** The steps that lead to a failpoint, then how to retry what was cut off. */
const MATRIX: {
  point: Failpoint;
  setup?: (t: Target) => Promise<unknown>;
  run: (t: Target) => Promise<unknown>;
  retry: (t: Target) => Promise<unknown>;
}[] = [
  ...(['create.saved', 'create.disk', 'create.launched', 'create.ready'] as const).map((point) => ({
    point,
    run: (t: Target) => call(t, 'POST', '/vms', { name: 'v', persistent: true }),
    retry: async (t: Target) =>
      expect((await call(t, 'POST', '/vms', { name: 'v', persistent: true })).status).to.equal(201),
  })),
  {
    point: 'clone.copied',
    run: async (t) => {
      expect((await call(t, 'POST', '/vms', { name: 'tpl', persistent: true })).status).to.equal(201);
      expect((await call(t, 'POST', '/vms/tpl/shutdown')).status).to.equal(200);
      return call(t, 'POST', '/vms/tpl/clone', { name: 'c' });
    },
    retry: async (t) => expect((await call(t, 'POST', '/vms/tpl/clone', { name: 'c' })).status).to.equal(201),
  },
  ...(['suspend.saving', 'suspend.saved'] as const).map((point) => ({
    point,
    run: async (t: Target) => {
      expect((await call(t, 'POST', '/vms', { name: 'p', persistent: true })).status).to.equal(201);
      return call(t, 'POST', '/vms/p/suspend');
    },
    retry: async (t: Target) => {
      // the suspend never finished: the VM is there, running or failed, and can be brought back and suspended
      const st = (await call(t, 'GET', '/vms/p')).json.status as string;
      if (st === 'error') expect((await call(t, 'POST', '/vms/p/start')).status).to.equal(200);
      expect((await call(t, 'POST', '/vms/p/suspend')).status).to.equal(200);
    },
  })),
  {
    point: 'restore.running',
    run: async (t) => {
      expect((await call(t, 'POST', '/vms', { name: 'r', persistent: true })).status).to.equal(201);
      expect((await call(t, 'POST', '/vms/r/suspend')).status).to.equal(200);
      return call(t, 'POST', '/vms/r/restore');
    },
    retry: async (t) => {
      // the record said running; the fake's guest died with its daemon: it starts again
      expect((await call(t, 'GET', '/vms/r')).json.status).to.equal('error');
      expect((await call(t, 'POST', '/vms/r/start')).status).to.equal(200);
    },
  },
  {
    point: 'restore.launched',
    run: async (t) => {
      expect((await call(t, 'POST', '/vms', { name: 'r', persistent: true })).status).to.equal(201);
      expect((await call(t, 'POST', '/vms/r/suspend')).status).to.equal(200);
      return call(t, 'POST', '/vms/r/restore');
    },
    retry: async (t) => expect((await call(t, 'POST', '/vms/r/restore')).status).to.equal(200),
  },
  {
    point: 'shutdown.stopped',
    run: async (t) => {
      expect((await call(t, 'POST', '/vms', { name: 's', persistent: true })).status).to.equal(201);
      return call(t, 'POST', '/vms/s/shutdown');
    },
    retry: async (t) => {
      const st = (await call(t, 'GET', '/vms/s')).json.status as string;
      expect(['stopped', 'error']).to.include(st);
      if (st === 'error') expect((await call(t, 'POST', '/vms/s/start')).status).to.equal(200);
      expect((await call(t, 'POST', '/vms/s/shutdown')).status).to.equal(200);
    },
  },
  {
    point: 'claim.renamed',
    // the template exists before the armed daemon starts, which fills its pool at once
    setup: async (t) => {
      expect((await call(t, 'POST', '/vms', { name: 'tpl', persistent: true })).status).to.equal(201);
      expect((await call(t, 'POST', '/vms/tpl/suspend')).status).to.equal(200);
    },
    run: async (t) => {
      await poll(async () => (await call(t, 'GET', '/pool')).json.ready >= 1, { ms: 10_000, every: 25 });
      expect((await call(t, 'GET', '/pool')).json.ready).to.equal(1);
      return call(t, 'POST', '/vms', { name: 'claimed', from_pool: true });
    },
    retry: async (t) => {
      expect((await call(t, 'GET', '/vms/claimed')).status).to.equal(404);
      expect((await call(t, 'POST', '/vms', { name: 'claimed', from_pool: true })).status).to.equal(201);
    },
  },
  {
    point: 'delete.destroyed',
    run: async (t) => {
      expect((await call(t, 'POST', '/vms', { name: 'd', persistent: true })).status).to.equal(201);
      return call(t, 'DELETE', '/vms/d');
    },
    retry: async (t) => {
      expect((await call(t, 'DELETE', '/vms/d')).status).to.be.oneOf([200, 404]);
      expect((await call(t, 'GET', '/vms/d')).status).to.equal(404);
    },
  },
];

/**
 * The crash matrix on the fake hypervisor: svcd dies with SIGKILL at each step (a failpoint armed by
 * SVC_FAILPOINT in test mode); a daemon started on the same data dir finds every VM whole or gone,
 * nothing half-made, and the cut-off operation can be retried.
 */
describe('crash matrix: the daemon killed at each step loses nothing (fake hypervisor)', function () {
  this.timeout(60_000);
  for (const m of MATRIX) {
    it(`dies at ${m.point}, restarts clean, and the operation can be retried`, async () => {
      const dir = tempDir('svc-crash-');
      const socket = join(dir, 'svc.sock');
      const raw = {
        data_dir: join(dir, 'data'),
        socket,
        api: '',
        hypervisor: 'fake',
        test_mode: true,
        fake_boot_delay: '10ms',
        log_level: 'warn',
        sandbox_metrics_enabled: false,
        warm_pool: { template: 'tpl', size: 1 },
      };
      const t: Target = { socketPath: socket };
      if (m.setup) {
        const plain = await spawnSvcd(dir, raw, { stderr: 'ignore' });
        await m.setup(t);
        await plain.stop();
      }
      const child = await spawnSvcd(dir, raw, { failpoint: m.point });
      const ran = await m.run(t).then(
        () => 'answered',
        (e: Error) => (e.name === 'AssertionError' ? e : 'cut off'),
      );
      if (ran instanceof Error) {
        child.proc.kill('SIGKILL');
        throw ran;
      }
      expect(await child.exited, child.stderr()).to.equal('SIGKILL');
      expect(child.stderr()).to.contain(`failpoint ${m.point}`);

      const d = await startDaemon(buildConfig(raw, {}, undefined, DRIVER_SECTIONS), { logger: new SilentLogger() });
      try {
        const vms = (await call(t, 'GET', '/vms')).json as { name: string; status: string }[];
        for (const v of vms)
          expect(['running', 'paused', 'stopped', 'suspended', 'error'], `${v.name} after ${m.point}`).to.include(
            v.status,
          );
        // warm pool members are records too, hidden from the list; the pool refills at start
        await d.poolSettled();
        const dirs = existsSync(join(raw.data_dir, 'vms')) ? readdirSync(join(raw.data_dir, 'vms')).sort() : [];
        const members = (((await call(t, 'GET', '/pool')).json.members as { name: string }[] | undefined) ?? []).map(
          (m) => m.name,
        );
        expect(dirs, 'a directory for every record and none other').to.deep.equal(
          [...vms.map((v) => v.name), ...members].sort(),
        );
        await m.retry(t);
      } finally {
        await d.stop();
      }
    });
  }
});
