import { expect } from 'chai';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { buildConfig, type Config } from '../../src/app/config.js';
import { DRIVER_SECTIONS } from '../../src/adapters/hypervisor/drivers.js';
import type { EgressEvent } from '../../src/domain/egress.js';
import { startDaemon, type DaemonOverrides, type RunningDaemon } from '../../src/main.js';
import { call, type Reply, type Target } from './http.js';
import { tempDir } from './temp-dirs.js';

export { tempDir };

export interface TestDaemon {
  daemon: RunningDaemon;
  config: Config;
  dir: string;
  unix: Target;
  tcp: Target;
  /** Calls over the Unix socket with the token. */
  call(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<Reply>;
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** Starts a real daemon (fake hypervisor unless told otherwise) on a temp socket and TCP port 0. */
export async function startTestDaemon(
  raw: Record<string, unknown> = {},
  overrides: DaemonOverrides = {},
  dir = tempDir(),
): Promise<TestDaemon> {
  const config = buildConfig(
    {
      data_dir: join(dir, 'data'),
      api: '127.0.0.1:0',
      hypervisor: 'fake',
      api_token: 'test-token',
      log_level: process.env.SVC_TEST_LOG ?? 'silent', // SVC_TEST_LOG=warn shows the daemons' warnings
      test_mode: true,
      fake_boot_delay: '10ms',
      // Tests bring their images; a test daemon never starts a build of its own unless asked.
      build_default_image: false,
      // Creates boot unless a test asks for snapshot creates (test/*/snapshot-creates*.test.ts):
      // a background capture per daemon would take the CPU the tests' own guests wait on.
      create_from_snapshot: false,
      ...raw,
    },
    {},
    undefined,
    DRIVER_SECTIONS,
  );
  let daemon = await startDaemon(config, overrides);
  const td: TestDaemon = {
    daemon,
    config,
    dir,
    unix: { socketPath: config.socket, token: config.api_token },
    tcp: { port: daemon.tcpPort, token: config.api_token },
    call: (m, p, b, h) => call(td.unix, m, p, b, h),
    async restart() {
      await daemon.stop();
      daemon = await startDaemon(config, overrides);
      td.daemon = daemon;
      td.tcp = { port: daemon.tcpPort, token: config.api_token };
    },
    async stop() {
      await daemon.stop();
      if (!process.env.SVC_TEST_KEEP) removeAfterStop(dir);
    },
  };
  return td;
}

/**
 * Removes a stopped daemon's directory. Once (a CI run of the forks e2e file) an entry appeared in
 * its data dir while it was being removed (ENOTEMPTY), after every VM had been deleted and the
 * daemon stopped: what is there then is printed, so the next time says who wrote it, and the
 * removal is tried again.
 */
function removeAfterStop(dir: string): void {
  try {
    rmSync(dir, { recursive: true, force: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOTEMPTY') throw err;
    const left: string[] = [];
    const walk = (d: string) => {
      for (const e of readdirSync(d, { withFileTypes: true }).slice(0, 50)) {
        const p = join(d, e.name);
        left.push(e.isDirectory() ? `${p}/` : p);
        if (e.isDirectory()) walk(p);
      }
    };
    try {
      walk(dir);
    } catch {
      // removed meanwhile
    }
    console.error(
      `a stopped daemon's directory was written to while it was removed: ${left.join(' ') || '(empty by now)'}`,
    );
    rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
  }
}

export interface ExecOut {
  exit_code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs `script` with `shell -c` in a VM through the daemon's exec (buffered); fails the test on a
 * non-200. `query` adds exec parameters (`&uid=1000`, `&timeout=5s`).
 */
export async function guestSh(
  d: Pick<TestDaemon, 'call'>,
  vm: string,
  script: string,
  o: { shell?: string; query?: string } = {},
): Promise<ExecOut> {
  const r = await d.call(
    'POST',
    `/vms/${encodeURIComponent(vm)}/exec?cmd=${encodeURIComponent(o.shell ?? 'sh')}&args=-c&args=${encodeURIComponent(script)}${o.query ?? ''}`,
  );
  expect(r.status, r.text).to.equal(200);
  return r.json as ExecOut;
}

/**
 * Restores a suspended VM and checks its guest came back from the saved state: a state that did
 * not load cold-boots the VM (its processes end), and the activity log says why.
 */
export async function restoreWarm(d: Pick<TestDaemon, 'call'>, vm: string): Promise<void> {
  const r = await d.call('POST', `/vms/${vm}/restore`);
  expect(r.status, r.text).to.equal(200);
  expect(r.json.warning, `the restore of ${vm}`).to.equal(undefined);
  const events = (await d.call('GET', '/activity?limit=200')).json.events as {
    action: string;
    target: string;
    message?: string;
  }[];
  const last = events.find((e) => e.action === 'restore' && e.target === vm); // newest first
  expect(last, `no restore of ${vm} in the activity log`).to.not.equal(undefined);
  expect(last!.message, `the restore of ${vm} cold-booted`).to.equal(undefined);
}

/**
 * A VM's egress log once it holds an entry `want` accepts: svc-netd writes its log a moment after
 * each decision (appends are gathered for up to 100 ms), so a test that just caused one waits.
 */
export async function egressLogged(
  d: Pick<TestDaemon, 'call'>,
  vm: string,
  want: (e: EgressEvent) => boolean,
  what: string,
): Promise<EgressEvent[]> {
  for (let i = 0; ; i++) {
    const entries = (await d.call('GET', `/vms/${vm}/egress/log?limit=10000`)).json.events as EgressEvent[];
    if (entries.some(want)) return entries;
    if (i >= 30) throw new Error(`not in the egress log of ${vm}: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
