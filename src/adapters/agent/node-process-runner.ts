import { spawn } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { injectable } from 'inversify';
import { commandNotFound } from '../../domain/agent.js';
import { NotFoundError } from '../../domain/errors.js';
import { findProgram } from './node-pty-factory.js';
import { startAs } from './run-as.js';
import {
  SpawnError,
  type ProcessExit,
  type ProcessRunner,
  type RunningProcess,
  type SpawnRequest,
} from '../../ports/agent/process-runner.js';
import { etcEnvironment } from './etc-environment.js';

const EXIT_GRACE_MS = 300;

/**
 * child_process with each command in its own process group, so a kill (timeout, client gone)
 * takes whatever the command started with it.
 */
@injectable()
export class NodeProcessRunner implements ProcessRunner {
  /**
   * `runAs`: native/svc-as, for a user with supplementary groups (null: they are not set).
   * `systemEnv`: what every command starts with under its own env (the guest's /etc/environment).
   */
  constructor(
    private readonly runAs: string | null = null,
    private readonly systemEnv: () => Record<string, string> = etcEnvironment,
  ) {}

  async spawn(req: SpawnRequest): Promise<RunningProcess> {
    const isDir = async (p: string) => !!(await stat(p).catch(() => undefined))?.isDirectory();
    if (req.cwd && !(await isDir(req.cwd))) throw new SpawnError(`cwd ${req.cwd} is not a directory`);
    const cwd = req.cwd ?? (req.home === undefined ? undefined : (await isDir(req.home)) ? req.home : '/');
    const env = { ...process.env, ...this.systemEnv(), ...req.env };
    let child;
    try {
      // svc-as execs what it is given: the program is found here first, so a missing one is said as spawn's ENOENT is
      const start = startAs(this.runAs, req.cmd, req.args, req, () =>
        findProgram(req.cmd, env.PATH, cwd ?? process.cwd()),
      );
      child = spawn(start.file, start.args, {
        cwd,
        uid: start.uid,
        gid: start.gid,
        env,
        detached: true,
        stdio: 'pipe',
      });
    } catch (err) {
      if (err instanceof NotFoundError) throw new SpawnError(err.message);
      throw new SpawnError(`cannot start ${req.cmd}: ${(err as Error).message}`);
    }
    const started = await new Promise<Error | undefined>((resolve) => {
      child.once('spawn', () => resolve(undefined));
      child.once('error', resolve);
    });
    if (started)
      throw new SpawnError(
        (started as NodeJS.ErrnoException).code === 'ENOENT'
          ? commandNotFound(req.cmd)
          : `cannot start ${req.cmd}: ${started.message}`,
      );
    const pid = child.pid!;
    let done = false;
    // Normally 'close' follows 'exit' once the pipes drain. A background child that inherited the
    // pipes would hold them open forever, so after the exit its output gets a short grace, then
    // the pipes are let go (as a shell prompt returns while a daemon it started keeps running).
    const exited = new Promise<ProcessExit>((resolve) => {
      let graceTimer: NodeJS.Timeout | undefined;
      const finish = (code: number | null, signal: NodeJS.Signals | null) => {
        if (done) return;
        done = true;
        clearTimeout(graceTimer);
        resolve({ code, signal });
      };
      child.once('close', finish);
      // What the pipes already hold is read before they are let go: an expired grace is followed by
      // a few passes of the loop's poll phase (setImmediate runs after it). The timer can expire
      // before the poll phase has read the child's last output when the guest's vCPU was not run
      // for the grace (a host full of TCG guests) or its clock jumped (a guest just restored):
      // that answered a fork's exec with exit 0 and no output (issue 42).
      const letGo = (code: number | null, signal: NodeJS.Signals | null, turns: number) => {
        if (done) return;
        if (turns > 0) return void setImmediate(() => letGo(code, signal, turns - 1));
        child.stdout.destroy();
        child.stderr.destroy();
        finish(code, signal);
      };
      child.once('exit', (code, signal) => {
        graceTimer = setTimeout(() => letGo(code, signal, 3), EXIT_GRACE_MS);
      });
    });
    return {
      pid,
      stdin: child.stdin,
      stdout: child.stdout,
      stderr: child.stderr,
      exited,
      kill: () => {
        if (done) return;
        try {
          process.kill(-pid, 'SIGKILL');
        } catch {
          child.kill('SIGKILL');
        }
      },
    };
  }
}
