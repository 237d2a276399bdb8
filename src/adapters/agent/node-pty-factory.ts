import { accessSync, constants, existsSync, readSync, statSync } from 'node:fs';
import type { Socket } from 'node:net';
import { join, resolve } from 'node:path';
import { injectable } from 'inversify';
import pty, { type IPty } from 'node-pty';
import type { PtyFactory, PtyOptions, PtySession } from '../../ports/agent/pty.js';
import { commandNotFound } from '../../domain/agent.js';
import { NotFoundError } from '../../domain/errors.js';
import { startAs } from './run-as.js';
import { etcEnvironment } from './etc-environment.js';

const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * The program as the terminal's exec would find it (a path from `cwd`, else the first in PATH
 * that is a file it may run), or a NotFoundError before any terminal is made: in the child,
 * node-pty's failed exec would only print a line and exit 1, like a program that ran.
 */
export function findProgram(file: string, path: string | undefined, cwd: string): string {
  const runnable = (f: string) => {
    try {
      accessSync(f, constants.X_OK);
      return statSync(f).isFile();
    } catch {
      return false;
    }
  };
  if (file.includes('/')) {
    if (runnable(resolve(cwd, file))) return file;
    throw new NotFoundError(commandNotFound(file));
  }
  for (const dir of (path || DEFAULT_PATH).split(':'))
    if (dir && runnable(resolve(cwd, join(dir, file)))) return join(dir, file);
  throw new NotFoundError(commandNotFound(file));
}

/** Real pseudo-terminals through node-pty. */
@injectable()
export class NodePtyFactory implements PtyFactory {
  /**
   * `runAs`: native/svc-as, for a user with supplementary groups (null: they are not set).
   * `systemEnv`: what every shell starts with under its own env (the guest's /etc/environment).
   */
  constructor(
    private readonly runAs: string | null = null,
    private readonly systemEnv: () => Record<string, string> = etcEnvironment,
  ) {}

  defaultShell(): string {
    for (const s of [process.env.SHELL, '/bin/bash', '/bin/sh']) if (s && existsSync(s)) return s;
    return '/bin/sh';
  }

  open(opts: PtyOptions): PtySession {
    const isDir = (d: string) => !!statSync(d, { throwIfNoEntry: false })?.isDirectory();
    const home = opts.home ?? process.env.HOME ?? '/';
    const cwd = opts.cwd ?? (isDir(home) ? home : '/');
    if (!isDir(cwd)) throw new NotFoundError(`no directory ${cwd} in the guest`);
    const env = { ...process.env, ...this.systemEnv(), TERM: 'xterm-256color', ...opts.env } as Record<string, string>;
    const program = findProgram(opts.shell, env.PATH, cwd);
    const start = startAs(this.runAs, program, opts.args ?? [], opts, () => program);
    const p = pty.spawn(start.file, start.args, {
      name: 'xterm-256color',
      cols: opts.cols,
      rows: opts.rows,
      cwd,
      env,
      encoding: null,
      ...(start.uid !== undefined ? { uid: start.uid, gid: start.gid } : {}),
    });
    drainBeforeDestroy(p);
    let dead = false;
    p.onExit(() => {
      dead = true;
    });
    return {
      pid: p.pid,
      write: (d) => p.write(d),
      resize: (c, r) => {
        if (!dead) p.resize(c, r);
      },
      onData: (l) => void p.onData((d: string | Buffer) => l(typeof d === 'string' ? Buffer.from(d, 'utf8') : d)),
      // node-pty gives a shell killed by a signal exit code 0 and the signal apart: 128 + the
      // signal, as a shell says of its children, so a killed shell never looks like a clean exit
      onExit: (l) => void p.onExit((e) => l(e.signal ? 128 + e.signal : e.exitCode)),
      kill: () => {
        if (dead) return;
        dead = true;
        try {
          p.kill('SIGHUP');
        } catch {
          // already gone
        }
      },
    };
  }
}

/** How long a terminal still held open after its shell's exit may keep sending output. */
export const HELD_TERMINAL_GRACE_MS = 1000;
/** What one destroy reads at most: a background job that keeps writing cannot hold it. */
const DRAIN_LIMIT = 4 << 20;

/**
 * node-pty destroys a terminal's socket 200 ms after its shell exits (its answer to macOS,
 * where the socket may never close: node-pty issue #72), and Node runs a due timer before it
 * polls for input. An agent that gets no CPU for those 200 ms loses the shell's last output.
 * On Linux the terminal ends by itself with EIO once it is drained, so the destroy reads what
 * waits first. If the terminal is still held open, it waits a little longer for that end.
 */
export function drainBeforeDestroy(term: IPty): void {
  const t = term as unknown as { _socket?: Socket; _fd?: number };
  const socket = t._socket;
  const fd = t._fd;
  if (!socket || typeof fd !== 'number') return;
  const destroy = socket.destroy.bind(socket);
  let late: NodeJS.Timeout | undefined;
  socket.destroy = (error?: Error) => {
    if (socket.destroyed) return socket;
    // called again in the grace: the terminal ended (Node's own destroy on EIO) or must go now
    if (late) {
      clearTimeout(late);
      return destroy(error);
    }
    if (drain(fd, (chunk) => socket.emit('data', chunk)) === 'ended') return destroy(error);
    late = setTimeout(() => destroy(error), HELD_TERMINAL_GRACE_MS);
    return socket;
  };
}

/** Reads what a terminal holds now: 'ended' when its other side is closed and it is empty. */
function drain(fd: number, data: (chunk: Buffer) => void): 'ended' | 'held' {
  for (let total = 0; total < DRAIN_LIMIT;) {
    const chunk = Buffer.allocUnsafe(64 << 10);
    let n: number;
    try {
      n = readSync(fd, chunk);
    } catch (e) {
      return (e as NodeJS.ErrnoException).code === 'EAGAIN' ? 'held' : 'ended';
    }
    if (n === 0) return 'ended';
    data(chunk.subarray(0, n));
    total += n;
  }
  return 'held';
}
