import { InvalidArgumentError } from './errors.js';
import { checkEnvVar, checkGuestUser, MAX_ENV_VARS } from './agent.js';
import { queryInt, queryOne, type Query } from './query.js';
import { parseRestart, type EntrypointChoice, type RestartPolicy } from './restart-policy.js';

/**
 * Durable processes (docs/processes.md): shapes shared by the agent, the daemon and the client, and
 * the rules that check what a caller sends. File watches are in domain/watches.ts.
 */

export type ProcessStream = 'stdout' | 'stderr' | 'pty';

/** POST /processes. */
export interface ProcessStart {
  cmd: string;
  args: string[];
  env?: Record<string, string>;
  cwd?: string;
  /** A user name (or number) in the guest; absent: the agent's user (root). */
  user?: string;
  tag?: string;
  pty?: { cols: number; rows: number };
  /** Keep the process's input open for POST .../stdin; false: its input is /dev/null. */
  stdin?: boolean;
  /** Start it again when it ends (on-failure: when it ended otherwise than with exit code 0). */
  restart?: RestartPolicy;
  /** With `restart`: how many times at most (absent: no limit). */
  max_restarts?: number;
}

/** The entrypoint a boot starts: the image's, with the VM's restart policy; none for `false`. */
export function bootEntrypoint(image: ProcessStart | undefined, choice?: EntrypointChoice): ProcessStart | undefined {
  if (!image || choice === false) return undefined;
  if (!choice) return image;
  return {
    ...image,
    restart: choice.restart,
    ...(choice.max_restarts !== undefined ? { max_restarts: choice.max_restarts } : {}),
  };
}

/**
 * The tag of the process an image's entrypoint runs as (a container image's Entrypoint and Cmd,
 * started by the agent at each cold boot: docs/image.md, "What runs at boot").
 */
export const ENTRYPOINT_TAG = 'entrypoint';

/** Why a process is no longer running. */
export type EndReason = 'exit' | 'signal' | 'reboot' | 'lost';

export interface ProcessInfo {
  id: string;
  pid: number;
  tag?: string;
  cmd: string;
  args: string[];
  pty: boolean;
  stdin: boolean;
  started_at: string;
  /** The VM the process was started in, when not this one (a clone's copy of its template's). */
  started_in?: string;
  state: 'running' | 'ended';
  /** Bytes written so far per stream: where a reader that wants only what comes next starts. */
  bytes: Partial<Record<ProcessStream, number>>;
  exit_code?: number;
  signal?: string;
  reason?: EndReason;
  ended_at?: string;
  /** Its restart policy, when it has one; `restarts`: how many times it was started again so far. */
  restart?: RestartPolicy;
  max_restarts?: number;
  restarts?: number;
  /**
   * The VM's timeline these offsets are on (domain/timeline.ts): a reader passes it back with its
   * offsets (`timeline=`) so that a revert between its reads is said, not skipped. Set by the daemon.
   */
  timeline?: string;
}

/** A process's state in a word or three, as `svc ps` and the dashboard show it. */
export function processState(p: ProcessInfo): string {
  if (p.state === 'running') return p.restarts ? `running (restarts ${p.restarts})` : 'running';
  if (p.reason === 'signal') return `killed (${p.signal})`;
  if (p.reason === 'exit') return `exited ${p.exit_code}`;
  return `ended (${p.reason})`;
}

/** The header of an output answer that names the timeline its offsets are on (domain/timeline.ts). */
export const TIMELINE_HEADER = 'x-svc-timeline';

/** One line of GET .../processes/{id}/output. */
export type OutputFrame =
  | { stream: ProcessStream; offset: number; data: string; encoding?: 'base64' }
  | { truncated: { stream: ProcessStream; before: number } }
  | { reason: EndReason; exit_code?: number; signal?: string; ended_at: string }
  /** The first line of a `tail` read: where each stream's last lines start (what a reconnect reads on from). */
  | { start: Partial<Record<ProcessStream, number>> }
  /**
   * The first line of a read whose `timeline` the VM has left (a revert): the guest now writes
   * other bytes from these offsets on than the reader may have read; the read starts there.
   */
  | { reverted: { timeline: string; from: OutputOffsets } };

/**
 * The most bytes one unencoded piece of output carries between the agent and the daemon
 * (`output?raw=1`, docs/processes.md): what the agent reads at once at most, what the daemon takes.
 */
export const PIECE_MAX_BYTES = 1024 * 1024;

/**
 * What the guest reads of a process's output before it is a frame: a stream's bytes at an offset
 * (whole UTF-8 characters where they are text), or a frame that carries no bytes.
 */
export type OutputPiece =
  { stream: ProcessStream; offset: number; bytes: Uint8Array } | Exclude<OutputFrame, { stream: ProcessStream }>;

export const MAX_TAG = 64;
const ID = /^p[1-9][0-9]{0,15}$/;
const TAG = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const MAX_ARGS = 4096;
const MAX_ARG_BYTES = 1 << 20;

export function isProcessId(s: string): boolean {
  return ID.test(s);
}

/** A process id (`p12`) or tag; InvalidArgument for anything else. */
export function assertProcessRef(s: string): string {
  if (!isProcessId(s) && !TAG.test(s))
    throw new InvalidArgumentError(`${JSON.stringify(s)} is not a process id or tag`);
  return s;
}

function str(v: unknown, what: string): string {
  if (typeof v !== 'string') throw new InvalidArgumentError(`${what} must be a string`);
  if (v.includes('\0')) throw new InvalidArgumentError(`${what} must not contain NUL`);
  return v;
}

/** Checks POST /processes's body. */
export function parseProcessStart(body: unknown): ProcessStart {
  if (!body || typeof body !== 'object' || Array.isArray(body))
    throw new InvalidArgumentError('body must be a JSON object');
  const b = body as Record<string, unknown>;
  const known = new Set(['cmd', 'args', 'env', 'cwd', 'user', 'tag', 'pty', 'stdin', 'restart', 'max_restarts']);
  for (const k of Object.keys(b)) if (!known.has(k)) throw new InvalidArgumentError(`unknown field ${k}`);
  const cmd = str(b.cmd, 'cmd');
  if (!cmd) throw new InvalidArgumentError('cmd is required');
  const out: ProcessStart = { cmd, args: [] };
  if (b.args !== undefined) {
    if (!Array.isArray(b.args)) throw new InvalidArgumentError('args must be an array of strings');
    if (b.args.length > MAX_ARGS) throw new InvalidArgumentError(`at most ${MAX_ARGS} args`);
    out.args = b.args.map((a, i) => str(a, `args[${i}]`));
  }
  if (new TextEncoder().encode(JSON.stringify([cmd, out.args])).length > MAX_ARG_BYTES)
    throw new InvalidArgumentError('cmd and args are too long (1 MiB)');
  if (b.env !== undefined) {
    if (!b.env || typeof b.env !== 'object' || Array.isArray(b.env))
      throw new InvalidArgumentError('env must be an object of strings');
    const vars = Object.entries(b.env as Record<string, unknown>);
    if (vars.length > MAX_ENV_VARS) throw new InvalidArgumentError(`at most ${MAX_ENV_VARS} env variables`);
    out.env = {};
    for (const [k, v] of vars) {
      out.env[k] = str(v, `env.${k}`);
      checkEnvVar(k, out.env[k]);
    }
  }
  if (b.cwd !== undefined) {
    const cwd = str(b.cwd, 'cwd');
    if (!cwd.startsWith('/')) throw new InvalidArgumentError('cwd must be an absolute path');
    out.cwd = cwd;
  }
  if (b.user !== undefined) {
    out.user = checkGuestUser(typeof b.user === 'number' ? String(b.user) : str(b.user, 'user'));
  }
  if (b.tag !== undefined) {
    const tag = str(b.tag, 'tag');
    if (!TAG.test(tag) || isProcessId(tag))
      throw new InvalidArgumentError(
        'tag must be 1-64 of letters, digits, ".", "_", "-", start with a letter or digit, and not look like an id',
      );
    out.tag = tag;
  }
  if (b.pty !== undefined && b.pty !== false && b.pty !== null) {
    const p = b.pty;
    if (p === true) out.pty = { cols: 80, rows: 24 };
    else if (typeof p !== 'object' || Array.isArray(p)) throw new InvalidArgumentError('pty must be {cols, rows}');
    else {
      const size = p as Record<string, unknown>;
      out.pty = { cols: termSize(size.cols, 'pty.cols', 80), rows: termSize(size.rows, 'pty.rows', 24) };
    }
  }
  if (b.stdin !== undefined) {
    if (typeof b.stdin !== 'boolean') throw new InvalidArgumentError('stdin must be true or false');
    out.stdin = b.stdin;
  }
  Object.assign(out, parseRestart(b, out));
  return out;
}

export function termSize(v: unknown, what: string, def: number): number {
  if (v === undefined) return def;
  const n = typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > 1000)
    throw new InvalidArgumentError(`${what} must be an integer from 1 to 1000`);
  return n;
}

/** Byte offsets an output read starts at: `all` for every stream, or per stream (one not named: 0). */
export type OutputOffsets = Partial<Record<ProcessStream, number>> & { all?: number };

/** The most lines a `tail` read asks for. */
export const MAX_TAIL_LINES = 1_000_000;

/**
 * Where an output read starts: at byte offsets (`from`), or at the last `tail` lines of each
 * stream (`tail -n`; 0: only what is written from now on). Not both.
 */
export interface OutputStart {
  from: OutputOffsets;
  tail?: number;
}

export function parseOutputStart(q: Query): OutputStart {
  const from = parseFrom(q);
  const tail = queryInt(q, 'tail', MAX_TAIL_LINES);
  if (tail !== undefined && Object.keys(from).length)
    throw new InvalidArgumentError('give from (byte offsets) or tail (the last lines), not both');
  return tail === undefined ? { from } : { from, tail };
}

/**
 * The `from` of an output read: `N` (every stream from byte N; 0 is everything kept) or
 * `stdout:N,stderr:M` (per stream; a stream not named starts at 0).
 */
export function parseFrom(q: Query): OutputOffsets {
  const v = queryOne(q, 'from');
  if (v === undefined || v === '') return {};
  if (/^\d{1,15}$/.test(v)) return { all: Number(v) };
  const out: Partial<Record<ProcessStream, number>> = {};
  for (const part of v.split(',')) {
    const m = /^(stdout|stderr|pty):(\d{1,15})$/.exec(part);
    if (!m) throw new InvalidArgumentError('from must be a byte offset or stream:offset,... (stdout:120,stderr:0)');
    out[m[1] as ProcessStream] = Number(m[2]);
  }
  return out;
}

/** Linux's signals by name (x86-64 numbers). */
const SIGNALS: Record<string, number> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGILL: 4,
  SIGTRAP: 5,
  SIGABRT: 6,
  SIGBUS: 7,
  SIGFPE: 8,
  SIGKILL: 9,
  SIGUSR1: 10,
  SIGSEGV: 11,
  SIGUSR2: 12,
  SIGPIPE: 13,
  SIGALRM: 14,
  SIGTERM: 15,
  SIGSTKFLT: 16,
  SIGCHLD: 17,
  SIGCONT: 18,
  SIGSTOP: 19,
  SIGTSTP: 20,
  SIGTTIN: 21,
  SIGTTOU: 22,
  SIGURG: 23,
  SIGXCPU: 24,
  SIGXFSZ: 25,
  SIGVTALRM: 26,
  SIGPROF: 27,
  SIGWINCH: 28,
  SIGIO: 29,
  SIGPWR: 30,
  SIGSYS: 31,
};

/** A signal to send, by name (SIGTERM or TERM) or number; its name. */
export function parseSignal(v: unknown): string {
  if (typeof v === 'number') {
    const name = Object.keys(SIGNALS).find((k) => SIGNALS[k] === v);
    if (name) return name;
  } else if (typeof v === 'string') {
    const name = v.toUpperCase().startsWith('SIG') ? v.toUpperCase() : `SIG${v.toUpperCase()}`;
    if (SIGNALS[name]) return name;
  }
  throw new InvalidArgumentError(`signal must be one of ${Object.keys(SIGNALS).join(', ')} (or its number)`);
}

/** A signal's name from its number (as a kept process's end records it). */
export function signalName(n: number): string {
  return Object.keys(SIGNALS).find((k) => SIGNALS[k] === n) ?? `SIG${n}`;
}
