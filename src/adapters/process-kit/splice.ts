import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import type { Socket } from 'node:net';
import type { Duplex, Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { childEnv } from './child-env.js';

/**
 * Socket-to-socket copies in the kernel: `svc-splice` (native/svc-splice.c, built into
 * dist/native/ by `npm run build`) gets the two sockets as its fd 0 and 1 and moves an exact
 * number of bytes between them with splice(2). Node has no splice; a copy through the daemon's
 * JavaScript costs two more copies of every byte than a direct one, which on a machine with few
 * cores is the difference between 60% and 90% of direct for a local agent (docs/benchmarks.md).
 */

/** Copies smaller than this go through Node: starting the helper costs about a millisecond. */
export const SPLICE_MIN_BYTES = 4 * 1024 * 1024;
const DEFAULT_HELPER = fileURLToPath(new URL('../../../native/svc-splice', import.meta.url));

/**
 * The helper's path for a `splice` setting (config `splice`): `auto` is the one built beside the
 * daemon, `off` none, anything else the path of another build. Null when there is none (not
 * built, not Linux, `off`, a path that is not an executable).
 */
export function spliceHelper(setting = 'auto'): string | null {
  const path = setting === 'auto' ? DEFAULT_HELPER : setting;
  return setting === 'off' || process.platform !== 'linux' || !executable(path) ? null : path;
}

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

type Handle = { fd?: unknown; readStop?: () => number; reading?: boolean };
const handleOf = (s: unknown) => (s as { _handle?: Handle } | null)?._handle;

/** The socket's file descriptor when it has one Node can hand to a child (TCP, Unix). */
export function socketFd(s: unknown): number | undefined {
  const fd = handleOf(s)?.fd;
  return typeof fd === 'number' && fd >= 0 ? fd : undefined;
}

/** Can `stopReads` hand this socket over: a descriptor, and reads libuv can stop? */
export function canStopReads(socket: Duplex): boolean {
  return socketFd(socket) !== undefined && typeof handleOf(socket)?.readStop === 'function';
}

/**
 * Stops every read of `socket` in the daemon so the helper is its only reader: the stream is
 * paused and libuv's reads stopped, with `reading` left set so Node's _read does not start them
 * again. Check `canStopReads` first. What Node had read already stays in the stream (`readBuffered`).
 */
export function stopReads(socket: Duplex): void {
  const handle = handleOf(socket)!;
  socket.pause();
  handle.readStop!();
  handle.reading = true;
}

/** What a paused stream has buffered, taken without asking it to read more. */
export function readBuffered(stream: Readable): Buffer[] {
  const out: Buffer[] = [];
  for (let c = stream.read() as Buffer | null; c !== null; c = stream.read() as Buffer | null) out.push(c);
  return out;
}

/** Why a spliced copy failed, from the helper's exit status (native/svc-splice.c). */
export class SpliceError extends Error {
  constructor(
    message: string,
    readonly side: 'source' | 'destination' | 'helper',
  ) {
    super(message);
  }
}

export interface SpliceRun {
  /** Settles when the helper exits: resolved when all `length` bytes moved. */
  done: Promise<void>;
  /** Stops the copy (the client left, the body was destroyed). */
  kill(): void;
}

export interface SpliceOptions {
  /** The helper gives up when either side does nothing for this long (default 120). */
  idleSeconds?: number;
  /**
   * `splice` (default): the bytes never leave the kernel. `copy`: the helper reads them into a
   * buffer and writes them out, which gives the receiver compact segments instead of the source's
   * page fragments; cheaper for a receiver that limits the copy (an upload's agent).
   */
  mode?: 'splice' | 'copy';
}

/**
 * Moves exactly `length` bytes from `source` to `dest` in a helper process. The caller must have
 * stopped Node's reads of `source` and let every earlier write to `dest` reach the kernel; it must
 * not read `source` or write `dest` until `done` settles.
 */
export function splice(helper: string, source: Socket, dest: Socket, length: number, o: SpliceOptions = {}): SpliceRun {
  const child: ChildProcess = spawn(helper, [String(length), String(o.idleSeconds ?? 120), o.mode ?? 'splice'], {
    stdio: [source, dest, 'pipe'],
    env: childEnv(),
  });
  let said = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    if (said.length < 2000) said += d;
  });
  const done = new Promise<void>((resolve, reject) => {
    child.once('error', (err) => reject(new SpliceError(`svc-splice did not start: ${err.message}`, 'helper')));
    child.once('close', (code, signal) => {
      if (code === 0) return resolve();
      const why = said.trim() || (signal ? `killed by ${signal}` : `exit ${code}`);
      reject(new SpliceError(why, code === 3 || code === 4 ? 'source' : code === 5 ? 'destination' : 'helper'));
    });
  });
  return {
    done,
    kill: () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
  };
}
