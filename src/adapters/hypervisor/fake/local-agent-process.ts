import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, openSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { childEnv } from '../../process-kit/child-env.js';

export interface LocalAgent {
  port: number;
  pid: number;
  stop(): Promise<void>;
}

/** The compiled agent entry point beside this file (dist/src/bin/svc-agent.js). */
const AGENT_BIN = fileURLToPath(new URL('../../../bin/svc-agent.js', import.meta.url));
/** The agent in one file, as guests run it (dist/agent/svc-agent.cjs, `npm run build:agent`). */
const AGENT_BUNDLE = fileURLToPath(new URL('../../../../agent/svc-agent.cjs', import.meta.url));

/**
 * The agent to start: the bundle when it was built after the compiled sources were last written
 * (`tsc` writes every file, so a compile since makes it stale), else the compiled entry point. The
 * bundle starts in about 0.25 s on an idle 2-core host against 0.65 s: it has no module graph to
 * resolve, and a test run starts hundreds of local agents, many of them beside a loaded daemon.
 */
export function agentScript(): string {
  try {
    if (statSync(AGENT_BUNDLE).mtimeMs >= statSync(AGENT_BIN).mtimeMs) return AGENT_BUNDLE;
  } catch {
    // no bundle built: the compiled entry point
  }
  return AGENT_BIN;
}

/** The HOME of what a stand-in guest runs: its `root` folder, as a guest's root user has `/root`. */
export const standInHome = (guestRoot: string): string => join(guestRoot, 'root');

/**
 * Runs the real svc-agent as a local child process on a free loopback port, with its state and
 * run directories under `dir`. Used by the fake hypervisor's `fake_agent` mode and by tests.
 */
export interface AgentSpawn {
  /** The agent script (the built one, or one a deploy put in the stand-in guest). */
  script?: string;
  /** `127.0.0.1:PORT`; port 0 picks a free one. */
  listen: string;
  stateDir: string;
  runDir: string;
  /** File descriptor the agent's stderr goes to. */
  log: number;
  /**
   * The HOME it and what it runs get: a directory of the stand-in guest (made if missing), never
   * this host user's, whose dotfiles a login or interactive shell would run (a `pyenv init` that
   * waits a minute on its lock, say: then every `bash -l` of a test waits with it).
   */
  home: string;
  env?: Record<string, string>;
  /** More of its flags (`--entrypoint FILE`, say). */
  flags?: string[];
}

/**
 * Starts svc-agent as a local child process and resolves with it and the port it listens on, read
 * from its first line (`{"listening": "host:port"}`). Rejects when it exits first or takes 30 s
 * (it starts in 0.25-0.65 s on an idle 2-core host, and took over 10 s beside a soak of 200 clients).
 */
export async function spawnAgent(o: AgentSpawn): Promise<{ child: ChildProcess; port: number }> {
  mkdirSync(o.home, { recursive: true });
  const child = spawn(
    process.execPath,
    [
      o.script ?? agentScript(),
      '--listen',
      o.listen,
      '--vsock-port',
      '0',
      '--no-system-identity',
      '--state-dir',
      o.stateDir,
      '--run-dir',
      o.runDir,
      ...(o.flags ?? []),
    ],
    {
      stdio: ['ignore', 'pipe', o.log],
      env: childEnv({ HOME: o.home, ...o.env }),
    },
  );
  // An agent that did not start is killed, not left running without an owner.
  const port = await new Promise<number>((resolve, reject) => {
    const rl = createInterface({ input: child.stdout! });
    const timer = setTimeout(() => reject(new Error('svc-agent did not start within 30 s')), 30_000);
    rl.once('line', (line) => {
      clearTimeout(timer);
      try {
        resolve(Number((JSON.parse(line) as { listening: string }).listening.split(':').pop()));
      } catch {
        reject(new Error(`unexpected svc-agent output: ${line}`));
      }
      rl.close();
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`svc-agent exited with ${code}`));
    });
    // not started at all (no descriptors or processes left): an `error` event, and no exit
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`svc-agent could not be started: ${err.message}`));
    });
  }).catch((err: Error) => {
    child.kill('SIGKILL');
    throw err;
  });
  child.stdout!.resume();
  return { child, port };
}

export async function startLocalAgent(
  dir: string,
  extraEnv: Record<string, string> = {},
  flags: string[] = [],
): Promise<LocalAgent> {
  const stateDir = join(dir, 'guest', 'var-lib-svc');
  const runDir = join(dir, 'guest', 'run-svc');
  mkdirSync(stateDir, { recursive: true });
  mkdirSync(runDir, { recursive: true });
  const { child, port } = await spawnAgent({
    listen: '127.0.0.1:0',
    stateDir,
    runDir,
    log: openSync(join(dir, 'agent.log'), 'a'),
    home: standInHome(join(dir, 'guest')),
    env: extraEnv,
    flags,
  });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return {
    port,
    pid: child.pid!,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}
