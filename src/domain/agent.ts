/** Shapes the guest agent speaks (decisions.md, "Agent shapes"); shared by agent, daemon and client. */
import { InvalidArgumentError } from './errors.js';

export interface Readiness {
  state?: string;
  phase?: string;
  message?: string;
  [key: string]: string | undefined;
}

export interface AgentHealth {
  hostname: string;
  agent_version: string;
  agent_uptime_sec: number;
  userdata_ran: boolean;
  readiness: Readiness;
  /** What this agent does that an older one did not (AGENT_FEATURES); absent from agents before them. */
  features?: string[];
}

/**
 * What an agent tells the daemon it does beyond what every agent did, in its health, so that a
 * request an older agent would misread is refused instead (an exec as a named user run as root,
 * an exec's env dropped, a terminal's command run as a login shell).
 */
export const AGENT_FEATURES = ['exec_user', 'exec_env', 'shell_cmd'] as const;
export type AgentFeature = (typeof AGENT_FEATURES)[number];

export interface ExecRequest {
  cmd: string;
  args: string[];
  cwd?: string;
  /** A user of the guest by name or number: its uid, gid, HOME, USER, LOGNAME, SHELL, and its home as the cwd. */
  user?: string;
  uid?: number;
  gid?: number;
  timeoutMs?: number;
  encoding?: 'utf8' | 'base64';
  env?: Record<string, string>;
}

/**
 * A terminal in the guest (the agent's /shell, the daemon's): a login shell (`shell`, else the
 * user's or the agent's), or a command run in it (`cmd` with `args`, as `svc x -t` and `docker exec
 * -t` run one); `cwd` and `env` for either.
 */
export interface TerminalRequest {
  cols?: number;
  rows?: number;
  shell?: string;
  /** A user of the guest (name or number) to open it as; default: the agent's (root). */
  user?: string;
  cmd?: string;
  args?: string[];
  cwd?: string;
  env?: Record<string, string>;
}

/** An environment variable's name, as a shell takes one. */
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** How many variables one command's request may set. */
export const MAX_ENV_VARS = 256;

/** `name=value` as a variable of a command's environment; InvalidArgumentError otherwise. */
export function checkEnvVar(name: string, value: string): void {
  if (!ENV_NAME.test(name))
    throw new InvalidArgumentError(`env name ${JSON.stringify(name.slice(0, 64))} is not valid`);
  if (value.includes('\0')) throw new InvalidArgumentError(`env ${name} must not contain NUL`);
}

const GUEST_USER = /^[a-z_][a-z0-9_.-]{0,31}\$?$|^\d{1,10}$/i;

/** `user` as a user name (as useradd takes one) or a number; InvalidArgumentError otherwise. */
export function checkGuestUser(user: string): string {
  if (!GUEST_USER.test(user))
    throw new InvalidArgumentError(`user must be a user name or number, got ${JSON.stringify(user.slice(0, 40))}`);
  return user;
}

/** A passwd login shell that lets a user log in (absolute, not nologin or false); undefined otherwise. */
export function loginShell(shell: string): string | undefined {
  return shell.startsWith('/') && !/\/(nologin|false)$/.test(shell) ? shell : undefined;
}

/** Commands of the shell itself: no program of that name exists to run (`cd`, `export`, `source`). */
const SHELL_BUILTINS = new Set(['cd', 'export', 'source', '.', 'alias', 'unset', 'set', 'ulimit', 'umask', 'eval']);

/**
 * What an exec or a terminal says of a command the guest lacks, with a hint when the command is
 * a shell's (a builtin, or a whole line given as one word: `svc x web 'ls | wc -l'`).
 */
export function commandNotFound(cmd: string): string {
  // isCommandNotFound reads these two openings back
  const what = cmd.includes('/') ? `no program ${cmd} in the guest` : `no command ${cmd} in the guest's PATH`;
  if (SHELL_BUILTINS.has(cmd)) return `${what} (${cmd} is part of the shell: run it in one, sh -c '${cmd} ...')`;
  if (/[\s;&|<>$`*?(){}'"]/.test(cmd)) return `${what} (a shell line? run it in a shell: sh -c '...')`;
  return what;
}

/** Is this error text commandNotFound's (a client told by a terminal's 404, which also means no cwd)? */
export function isCommandNotFound(message: string): boolean {
  return /^no (command|program) /.test(message);
}

export interface ExecResult {
  stdout: string;
  stderr: string;
  exit_code: number;
  error?: string;
  truncated?: boolean;
}

/**
 * The exec channel (docs/agent.md): one WebSocket to the agent at EXEC_CHANNEL_PATH carries
 * buffered execs without stdin as numbered text messages, so a call costs the guest one frame
 * instead of an HTTP request through its router. Daemon to agent: `{id, query}` (the query string
 * of POST /exec) or `{id, cancel: true}`; agent to daemon: `{id, result}` (an ExecResult) or
 * `{id, status, error: {error, code}}`. Closing the socket kills every command it started.
 */
export const EXEC_CHANNEL_PATH = '/exec/channel';

/**
 * A guest's TCP port through its agent (docs/agent.md): `GET PORT_PATH?port=N` with
 * `Connection: Upgrade` and `Upgrade: tcp` is answered `101` once the agent has connected to port
 * N on the guest's loopback (127.0.0.1, then ::1), and the connection then carries that port's
 * bytes both ways. Nothing listening is a 404.
 */
export const PORT_PATH = '/tcp';
export const PORT_UPGRADE = 'tcp';

/** A guest port as a path or query names it: digits, 1 to 65535. */
export function parseGuestPort(raw: string): number {
  const n = /^\d{1,5}$/.test(raw) ? Number(raw) : 0;
  if (n < 1 || n > 65535)
    throw new InvalidArgumentError(`invalid port ${JSON.stringify(raw.slice(0, 20))}: 1 to 65535`);
  return n;
}

/** The most a buffered exec's answer may take, on HTTP or the channel: two 16 MiB streams, escaped. */
export const EXEC_ANSWER_LIMIT = 64 << 20;

export type ExecChannelRequest = { id: number; query: string } | { id: number; cancel: true };
export type ExecChannelAnswer =
  { id: number; result: ExecResult } | { id: number; status: number; error: { error: string; code: string } };

export type ExecFrameType = 'started' | 'stdout' | 'stderr' | 'exit' | 'error';

export interface ExecFrame {
  type: ExecFrameType;
  t: string;
  pid?: number;
  data?: string;
  exit_code?: number;
  error?: string;
  /** On an `error` frame the daemon writes when the stream broke after it began: the error's code. */
  code?: string;
}

export type FsType = 'file' | 'directory' | 'symlink' | 'other';

export interface FsInfo {
  name: string;
  path: string;
  type: FsType;
  size: number;
  mode: string;
  mtime: string;
  target?: string;
}

export interface GuestStats {
  uptime_sec: number;
  load1: number;
  load5: number;
  load15: number;
  cpus: number;
  mem_total_bytes: number;
  mem_available_bytes: number;
  disk_total_bytes?: number;
  disk_free_bytes?: number;
}

export type CopyMode = 'binary' | 'tar';

export interface MaterializeRequest {
  name: string;
  data: string;
  mode?: string;
  path?: string;
  uid?: number;
  gid?: number;
}

/** Parses a file mode given as an octal string ("0644", "600") or number. */
export function parseMode(v: unknown, fallback: number): number {
  if (v === undefined || v === null || v === '') return fallback;
  if (typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= 0o7777) return v;
  if (typeof v === 'string' && /^0?[0-7]{1,4}$/.test(v)) return parseInt(v, 8);
  return NaN;
}

export function formatMode(mode: number): string {
  return '0' + (mode & 0o7777).toString(8).padStart(3, '0');
}

/** What a guest is told after a restore or clone: who it is now and what time it is. */
export interface GuestIdentity {
  hostname: string;
  time_ms: number;
  /** A new machine id (32 hex) for a clone; omitted keeps the current one (a restore). */
  machine_id?: string;
  /** The overlay address (`10.77.0.N/24`) a clone must take instead of its template's. */
  overlay_ip?: string;
  /**
   * 32 random bytes of the host's (64 hex digits) for a clone or fork: mixed into the guest's
   * entropy pool, and the kernel's generator reseeded from it, so copies of one saved state do not
   * draw the same "random" numbers (docs/forks.md).
   */
  entropy?: string;
  /**
   * The size the VM's disk has now, in bytes, for a copy of a snapshot made on a smaller disk (a
   * create restored from its image's snapshot): the guest waits to see it and grows its root
   * filesystem into it before it answers (docs/snapshot-creates.md).
   */
  disk_bytes?: number;
  /**
   * The VM's userdata, for a copy restored from a snapshot that booted without it: run as at boot
   * (in the background; `userdata-ran` marks its end), its old marker removed before the answer.
   */
  userdata?: string;
}

/**
 * What a guest is told about its egress secrets (docs/egress-secrets.md): the CA the egress path
 * signs with (to trust; none: the one it had goes) and the variables that hold the placeholders,
 * set for every process the agent starts.
 */
export interface GuestEgress {
  ca_pem?: string;
  env: Record<string, string>;
}

/** The largest userdata a create takes (create-request.ts) and an identity carries. */
export const USERDATA_MAX_BYTES = 256 * 1024;
