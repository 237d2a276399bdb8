import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import { call } from './http.js';

const SVCD = fileURLToPath(new URL('../../src/bin/svcd.js', import.meta.url));

/** svcd as a process of its own, as people run it: what the crash matrices kill and the soak measures. */
export interface SvcdProcess {
  proc: ChildProcess;
  socket: string;
  /** What it wrote on stderr so far (when started with `stderr: 'pipe'`). */
  stderr(): string;
  /** The signal that ended it (null for an exit). */
  exited: Promise<NodeJS.Signals | null>;
  /** SIGTERM, and waits for the exit. */
  stop(): Promise<void>;
}

/**
 * Writes `raw` as `dir/config.yaml` and starts svcd on it (with Node's `nodeArgs`), armed with
 * `failpoint` when given (`SVC_FAILPOINT`; the config needs `test_mode`); resolves once it answers `/healthz` on its Unix
 * socket (or has exited). The socket file alone was not enough: on a loaded CI host a call made
 * once it existed was refused, the crash matrix took the refusal for the daemon's death and then
 * waited for an exit that never came.
 */
export async function spawnSvcd(
  dir: string,
  raw: Record<string, unknown>,
  o: { failpoint?: string; stderr?: 'pipe' | 'inherit' | 'ignore'; nodeArgs?: string[] } = {},
): Promise<SvcdProcess> {
  const config = join(dir, 'config.yaml');
  writeFileSync(config, stringify(raw));
  const env = o.failpoint ? { ...process.env, SVC_FAILPOINT: o.failpoint } : process.env;
  const proc = spawn(process.execPath, [...(o.nodeArgs ?? []), SVCD, '--config', config], {
    env,
    stdio: ['ignore', 'ignore', o.stderr ?? 'pipe'],
  });
  let err = '';
  proc.stderr?.on('data', (c: Buffer) => (err += c.toString()));
  const exited = new Promise<NodeJS.Signals | null>((r) => proc.once('exit', (_code, sig) => r(sig)));
  const socket = String(raw.socket);
  const answers = () =>
    call({ socketPath: socket }, 'GET', '/healthz').then(
      (r) => r.status === 200,
      () => false,
    );
  let answered = false;
  for (const until = Date.now() + 30_000; Date.now() < until && proc.exitCode === null && proc.signalCode === null;) {
    if ((answered = await answers())) break;
    await new Promise((r) => setTimeout(r, 25));
  }
  // One that exited is the caller's to look at (a failpoint's test); one still starting is a failure here.
  if (!answered && proc.exitCode === null && proc.signalCode === null) {
    proc.kill('SIGKILL');
    throw new Error(`svcd did not answer on ${socket} within 30 s: ${err.slice(-2000)}`);
  }
  return {
    proc,
    socket,
    exited,
    stderr: () => err,
    stop: async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      await exited;
    },
  };
}
