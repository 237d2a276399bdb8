import {
  checkEnvVar,
  checkGuestUser,
  MAX_ENV_VARS,
  type CopyMode,
  type ExecRequest,
  type TerminalRequest,
} from './agent.js';
import { formatDuration, parseDuration } from './duration.js';
import { InvalidArgumentError } from './errors.js';

/**
 * Query parsing for both servers (the daemon's API and the agent's). The one rule for repeated
 * keys: a key that takes one value and is given twice is a 400 ("give it once"); only list keys
 * (exec `args`) take every value, in order.
 */
export type Query = Record<string, unknown>;

/** One value of `key`, or undefined; InvalidArgumentError when it is repeated. */
export function queryOne(q: Query, key: string): string | undefined {
  const v = q[key];
  if (v === undefined) return undefined;
  if (Array.isArray(v)) throw new InvalidArgumentError(`${key} must be given once`);
  return String(v);
}

/** Every value of a list key, in order. */
export function queryList(q: Query, key: string): string[] {
  const v = q[key];
  if (v === undefined) return [];
  return (Array.isArray(v) ? v : [v]).map(String);
}

/** An optional whole number from 0 to `max`; empty means absent. */
export function queryInt(q: Query, key: string, max: number): number | undefined {
  const v = queryOne(q, key);
  if (v === undefined || v === '') return undefined;
  if (!/^\d+$/.test(v) || Number(v) > max) throw new InvalidArgumentError(`${key} must be an integer from 0 to ${max}`);
  return Number(v);
}

/** An optional uid/gid-sized whole number. */
export function optUint(q: Query, key: string): number | undefined {
  const v = queryOne(q, key);
  if (v === undefined || v === '') return undefined;
  if (!/^\d+$/.test(v) || Number(v) > 0xffffffff)
    throw new InvalidArgumentError(`${key} must be a non-negative integer`);
  return Number(v);
}

export function parseBool(q: Query, key: string, def: boolean): boolean {
  const v = queryOne(q, key);
  if (v === undefined || v === '') return def;
  if (v === 'true' || v === '1') return true;
  if (v === 'false' || v === '0') return false;
  throw new InvalidArgumentError(`${key} must be true or false`);
}

/** An optional absolute path (a cwd, a shell); empty means absent. */
function optAbsolute(q: Query, key: string): string | undefined {
  const v = queryOne(q, key);
  if (!v) return undefined;
  if (!v.startsWith('/')) throw new InvalidArgumentError(`${key} must be an absolute path`);
  return v;
}

/** The exec query: cmd, repeated args, buffered, cwd, user, uid, gid, timeout, encoding, repeated env. */
export function parseExecQuery(q: Query): ExecRequest & { buffered: boolean } {
  const cmd = queryOne(q, 'cmd');
  if (!cmd) throw new InvalidArgumentError('cmd is required');
  const req: ExecRequest & { buffered: boolean } = {
    cmd,
    args: queryList(q, 'args'),
    buffered: parseBool(q, 'buffered', true),
  };
  const cwd = optAbsolute(q, 'cwd');
  if (cwd) req.cwd = cwd;
  const user = queryOne(q, 'user');
  if (user) req.user = checkGuestUser(user);
  req.uid = optUint(q, 'uid');
  req.gid = optUint(q, 'gid');
  if (req.user !== undefined && req.uid !== undefined) throw new InvalidArgumentError('give user or uid, not both');
  const timeout = queryOne(q, 'timeout');
  if (timeout) req.timeoutMs = parseDuration(timeout, 'timeout');
  const enc = queryOne(q, 'encoding');
  if (enc !== undefined && enc !== '' && enc !== 'utf8' && enc !== 'base64')
    throw new InvalidArgumentError('encoding must be utf8 or base64');
  if (enc === 'base64') req.encoding = 'base64';
  const env = queryList(q, 'env');
  if (env.length) req.env = parseEnvList(env);
  return req;
}

/** Repeated `NAME=VALUE` (exec's `env`): a name given twice takes its last value, as env(1) does. */
function parseEnvList(list: string[]): Record<string, string> {
  if (list.length > MAX_ENV_VARS) throw new InvalidArgumentError(`at most ${MAX_ENV_VARS} env variables`);
  const env: Record<string, string> = {};
  for (const e of list) {
    const eq = e.indexOf('=');
    if (eq < 0) throw new InvalidArgumentError(`env must be NAME=VALUE, got ${JSON.stringify(e.slice(0, 64))}`);
    const [name, value] = [e.slice(0, eq), e.slice(eq + 1)];
    checkEnvVar(name, value);
    env[name] = value;
  }
  return env;
}

/** The exec query of a request, as parseExecQuery reads it: what the client and the daemon send. */
export function formatExecQuery(req: ExecRequest, buffered: boolean): URLSearchParams {
  const p = new URLSearchParams({ cmd: req.cmd, buffered: String(buffered) });
  for (const a of req.args) p.append('args', a);
  if (req.cwd) p.set('cwd', req.cwd);
  if (req.user !== undefined) p.set('user', req.user);
  if (req.uid !== undefined) p.set('uid', String(req.uid));
  if (req.gid !== undefined) p.set('gid', String(req.gid));
  if (req.timeoutMs) p.set('timeout', formatDuration(req.timeoutMs));
  if (req.encoding) p.set('encoding', req.encoding);
  for (const [k, v] of Object.entries(req.env ?? {})) p.append('env', `${k}=${v}`);
  return p;
}

/** A URL's query as a Query: a key given more than once as the list of its values. */
export function queryOf(p: URLSearchParams): Query {
  const q: Query = {};
  for (const k of new Set(p.keys())) {
    const all = p.getAll(k);
    q[k] = all.length > 1 ? all : all[0];
  }
  return q;
}

/**
 * The shell query: cols, rows (1 to 1000), shell (absolute), user; or cmd with repeated args (a
 * command in the terminal, not with shell); cwd (absolute) and repeated env for either.
 */
export function parseShellQuery(q: Query): TerminalRequest {
  const t: TerminalRequest = {};
  for (const k of ['cols', 'rows'] as const) {
    const v = queryOne(q, k);
    if (v === undefined || v === '') continue;
    if (!/^\d{1,4}$/.test(v) || Number(v) < 1 || Number(v) > 1000)
      throw new InvalidArgumentError(`${k} must be an integer from 1 to 1000`);
    t[k] = Number(v);
  }
  const shell = optAbsolute(q, 'shell');
  if (shell) t.shell = shell;
  const user = queryOne(q, 'user');
  if (user) t.user = checkGuestUser(user);
  const cmd = queryOne(q, 'cmd');
  const args = queryList(q, 'args');
  if (cmd) {
    if (t.shell) throw new InvalidArgumentError('give shell or cmd, not both');
    if ([cmd, ...args].some((a) => a.includes('\0')))
      throw new InvalidArgumentError('cmd and args must not contain NUL');
    t.cmd = cmd;
    t.args = args;
  } else if (args.length) throw new InvalidArgumentError('args go with cmd');
  const cwd = optAbsolute(q, 'cwd');
  if (cwd) t.cwd = cwd;
  const env = queryList(q, 'env');
  if (env.length) t.env = parseEnvList(env);
  return t;
}

/** The shell query of a request, as parseShellQuery reads it. */
export function formatShellQuery(t: TerminalRequest): URLSearchParams {
  const p = new URLSearchParams();
  if (t.cols) p.set('cols', String(t.cols));
  if (t.rows) p.set('rows', String(t.rows));
  if (t.shell) p.set('shell', t.shell);
  if (t.user) p.set('user', t.user);
  if (t.cmd) p.set('cmd', t.cmd);
  for (const a of t.cmd ? (t.args ?? []) : []) p.append('args', a);
  if (t.cwd) p.set('cwd', t.cwd);
  for (const [k, v] of Object.entries(t.env ?? {})) p.append('env', `${k}=${v}`);
  return p;
}

export function parseCopyMode(q: Query): CopyMode {
  const m = queryOne(q, 'mode') ?? 'binary';
  if (m !== 'binary' && m !== 'tar') throw new InvalidArgumentError('mode must be binary or tar');
  return m;
}

export function requiredPath(q: Query): string {
  const p = queryOne(q, 'path');
  if (!p) throw new InvalidArgumentError('path is required');
  if (!p.startsWith('/')) throw new InvalidArgumentError(`path must be absolute, got ${JSON.stringify(p)}`);
  return p;
}

/** PUT cp's query: where, how (binary or tar), and the file's permissions and owner. */
export interface UploadQuery {
  path: string;
  mode: CopyMode;
  permissions?: string;
  uid?: number;
  gid?: number;
}

export function parseUploadQuery(q: Query): UploadQuery {
  return {
    path: requiredPath(q),
    mode: parseCopyMode(q),
    permissions: queryOne(q, 'permissions'),
    uid: optUint(q, 'uid'),
    gid: optUint(q, 'gid'),
  };
}
