import { StringDecoder } from 'node:string_decoder';
import type { Readable } from 'node:stream';
import { inject, injectable, optional } from 'inversify';
import { loginShell, type ExecFrame, type ExecRequest, type ExecResult } from '../../domain/agent.js';
import { AsyncQueue } from '../async-queue.js';
import { GuestUsers } from '../../ports/agent/kept-processes.js';
import { ProcessRunner, SpawnError, type RunningProcess } from '../../ports/agent/process-runner.js';

export const BUFFERED_CAP_BYTES = 16 * 1024 * 1024;

function now(): string {
  return new Date().toISOString();
}

/**
 * Runs commands for /exec. Buffered: output capped at 16 MiB per stream (`truncated` past it).
 * Streamed: frames as output arrives. A command that cannot start reports exit 127 with `error`;
 * a timeout kills the process group and reports exit -1.
 */
@injectable()
export class ExecService {
  constructor(
    @inject(ProcessRunner) private readonly runner: ProcessRunner,
    @inject(GuestUsers) @optional() private readonly users?: GuestUsers,
  ) {}

  /**
   * A command run as another user (`user`, or `uid` alone) gets that user's gid unless the request
   * sets one, and its HOME, USER, LOGNAME and SHELL (from the guest's passwd), as `su` would give
   * them; the request's own env wins. `user` also starts it in the user's home (/ when it has none)
   * unless `cwd` says where, as a login does; a `user` the guest does not have cannot start (exit 127).
   */
  private async spawn(req: ExecRequest): Promise<RunningProcess> {
    const who = req.user ?? (req.uid === undefined ? undefined : String(req.uid));
    if (who === undefined) return this.runner.spawn(req);
    const user = this.users ? await this.users.find(who).catch(() => null) : null;
    if (!user) {
      // a uid the guest's users do not answer for runs as that uid, as it always did
      if (req.user === undefined) return this.runner.spawn(req);
      throw new SpawnError(
        this.users ? `no user ${req.user} in the guest` : 'this agent cannot run a command as another user',
      );
    }
    const shell = loginShell(user.shell);
    const env: Record<string, string> = { HOME: user.home, USER: user.name, LOGNAME: user.name };
    if (shell) env.SHELL = shell;
    return this.runner.spawn({
      ...req,
      uid: user.uid,
      gid: req.gid ?? user.gid,
      groups: user.groups,
      home: req.user === undefined ? undefined : user.home,
      env: { ...env, ...req.env },
    });
  }

  /** `signal` is the caller leaving: the process group is killed. */
  async buffered(req: ExecRequest, stdin?: Readable, signal?: AbortSignal): Promise<ExecResult> {
    let proc: RunningProcess;
    try {
      proc = await this.spawn(req);
    } catch (err) {
      stdin?.resume();
      return { stdout: '', stderr: '', exit_code: 127, error: (err as Error).message };
    }
    const out = { stdout: [] as Buffer[], stderr: [] as Buffer[], sizes: { stdout: 0, stderr: 0 }, truncated: false };
    for (const which of ['stdout', 'stderr'] as const) {
      proc[which].on('data', (c: Buffer) => {
        const room = BUFFERED_CAP_BYTES - out.sizes[which];
        if (room <= 0) {
          out.truncated = true;
          return;
        }
        if (c.length > room) out.truncated = true;
        const part = c.length > room ? c.subarray(0, room) : c;
        out[which].push(part);
        out.sizes[which] += part.length;
      });
    }
    this.feed(proc, stdin);
    const timedOut = this.armTimeout(proc, req.timeoutMs);
    const gone = () => proc.kill();
    if (signal?.aborted) gone();
    signal?.addEventListener('abort', gone, { once: true });
    const exit = await proc.exited;
    signal?.removeEventListener('abort', gone);
    clearTimeout(timedOut.timer);
    const enc = req.encoding === 'base64' ? 'base64' : 'utf8';
    const result: ExecResult = {
      stdout: Buffer.concat(out.stdout).toString(enc),
      stderr: Buffer.concat(out.stderr).toString(enc),
      exit_code: timedOut.fired ? -1 : exitCode(exit),
    };
    if (timedOut.fired) result.error = `timed out after ${req.timeoutMs} ms; killed`;
    else if (exit.code === null) result.error = `killed by ${exit.signal}`;
    if (out.truncated) result.truncated = true;
    return result;
  }

  /**
   * Frames as they come. Stopping the iteration early (client gone) kills the process.
   */
  stream(req: ExecRequest, stdin?: Readable, signal?: AbortSignal): AsyncIterable<ExecFrame> & { cancel(): void } {
    const q = new AsyncQueue<ExecFrame>();
    let proc: RunningProcess | undefined;
    let cancelled = false;
    const run = async () => {
      try {
        proc = await this.spawn(req);
      } catch (err) {
        stdin?.resume();
        const msg = err instanceof SpawnError ? err.message : String(err);
        q.push({ type: 'error', t: now(), error: msg });
        q.push({ type: 'exit', t: now(), exit_code: 127, error: msg });
        q.close();
        return;
      }
      if (cancelled) proc.kill();
      q.push({ type: 'started', t: now(), pid: proc.pid });
      for (const which of ['stdout', 'stderr'] as const) {
        const dec = req.encoding === 'base64' ? undefined : new StringDecoder('utf8');
        proc[which].on('data', (c: Buffer) => {
          const data = dec ? dec.write(c) : c.toString('base64');
          if (data) q.push({ type: which, t: now(), data });
        });
        let flushed = false;
        const flush = () => {
          if (flushed) return;
          flushed = true;
          const rest = dec?.end();
          if (rest) q.push({ type: which, t: now(), data: rest });
        };
        proc[which].on('end', flush);
        proc[which].on('close', flush);
      }
      this.feed(proc, stdin);
      const timedOut = this.armTimeout(proc, req.timeoutMs);
      const exit = await proc.exited;
      clearTimeout(timedOut.timer);
      const frame: ExecFrame = { type: 'exit', t: now(), exit_code: timedOut.fired ? -1 : exitCode(exit) };
      if (timedOut.fired) frame.error = `timed out after ${req.timeoutMs} ms; killed`;
      else if (exit.code === null) frame.error = `killed by ${exit.signal}`;
      q.push(frame);
      q.close();
    };
    void run();
    const cancel = () => {
      cancelled = true;
      proc?.kill();
    };
    if (signal?.aborted) cancel();
    signal?.addEventListener('abort', cancel, { once: true });
    return Object.assign(q, { cancel });
  }

  private feed(proc: RunningProcess, stdin?: Readable): void {
    proc.stdin.on('error', () => undefined); // EPIPE when the command ignores its input
    if (stdin) stdin.pipe(proc.stdin);
    else proc.stdin.end();
  }

  private armTimeout(proc: RunningProcess, ms?: number): { fired: boolean; timer?: NodeJS.Timeout } {
    const state: { fired: boolean; timer?: NodeJS.Timeout } = { fired: false };
    if (ms && ms > 0) {
      state.timer = setTimeout(() => {
        state.fired = true;
        proc.kill();
      }, ms);
    }
    return state;
  }
}

function exitCode(e: { code: number | null; signal: string | null }): number {
  if (e.code !== null) return e.code;
  return 128 + (SIGNALS[e.signal ?? ''] ?? 0);
}

const SIGNALS: Record<string, number> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGKILL: 9,
  SIGSEGV: 11,
  SIGPIPE: 13,
  SIGTERM: 15,
};
