import { spawn } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { injectable } from 'inversify';
import { SpawnError, type ProcessExit, type ProcessRunner, type RunningProcess, type SpawnRequest } from '../../ports/guest/process-runner.js';

/**
 * child_process with each command in its own process group, so a kill (timeout, client gone)
 * takes whatever the command started with it.
 */
@injectable()
export class NodeProcessRunner implements ProcessRunner {
  async spawn(req: SpawnRequest): Promise<RunningProcess> {
    if (req.cwd) {
      const st = await stat(req.cwd).catch(() => undefined);
      if (!st?.isDirectory()) throw new SpawnError(`cwd ${req.cwd} is not a directory`);
    }
    let child;
    try {
      child = spawn(req.cmd, req.args, {
        cwd: req.cwd, uid: req.uid, gid: req.gid, env: { ...process.env, ...req.env }, detached: true, stdio: 'pipe',
      });
    } catch (err) {
      throw new SpawnError(`cannot start ${req.cmd}: ${(err as Error).message}`);
    }
    const started = await new Promise<Error | undefined>((resolve) => {
      child.once('spawn', () => resolve(undefined));
      child.once('error', resolve);
    });
    if (started) throw new SpawnError(`cannot start ${req.cmd}: ${started.message}`);
    const pid = child.pid!;
    let done = false;
    const exited = new Promise<ProcessExit>((resolve) => {
      child.once('close', (code, signal) => {
        done = true;
        resolve({ code, signal });
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
