import type { CopyMode, ExecRequest } from './agent.js';
import { parseDuration } from './duration.js';
import { InvalidArgumentError } from './errors.js';

type Query = Record<string, unknown>;

function one(q: Query, key: string): string | undefined {
  const v = q[key];
  if (v === undefined) return undefined;
  if (Array.isArray(v)) throw new InvalidArgumentError(`${key} must be given once`);
  return String(v);
}

function optUint(q: Query, key: string): number | undefined {
  const v = one(q, key);
  if (v === undefined || v === '') return undefined;
  if (!/^\d+$/.test(v) || Number(v) > 0xffffffff) throw new InvalidArgumentError(`${key} must be a non-negative integer`);
  return Number(v);
}

export function parseBool(q: Query, key: string, def: boolean): boolean {
  const v = one(q, key);
  if (v === undefined || v === '') return def;
  if (v === 'true' || v === '1') return true;
  if (v === 'false' || v === '0') return false;
  throw new InvalidArgumentError(`${key} must be true or false`);
}

/** The exec query (daemon and agent share it): cmd, repeated args, buffered, cwd, uid, gid, timeout, encoding. */
export function parseExecQuery(q: Query): ExecRequest & { buffered: boolean } {
  const cmd = one(q, 'cmd');
  if (!cmd) throw new InvalidArgumentError('cmd is required');
  const rawArgs = q.args;
  const args = rawArgs === undefined ? [] : (Array.isArray(rawArgs) ? rawArgs : [rawArgs]).map(String);
  const req: ExecRequest & { buffered: boolean } = { cmd, args, buffered: parseBool(q, 'buffered', true) };
  const cwd = one(q, 'cwd');
  if (cwd) {
    if (!cwd.startsWith('/')) throw new InvalidArgumentError('cwd must be an absolute path');
    req.cwd = cwd;
  }
  req.uid = optUint(q, 'uid');
  req.gid = optUint(q, 'gid');
  const timeout = one(q, 'timeout');
  if (timeout) req.timeoutMs = parseDuration(timeout, 'timeout');
  const enc = one(q, 'encoding');
  if (enc !== undefined && enc !== '' && enc !== 'utf8' && enc !== 'base64') throw new InvalidArgumentError('encoding must be utf8 or base64');
  if (enc === 'base64') req.encoding = 'base64';
  return req;
}

export function parseCopyMode(q: Query): CopyMode {
  const m = one(q, 'mode') ?? 'binary';
  if (m !== 'binary' && m !== 'tar') throw new InvalidArgumentError('mode must be binary or tar');
  return m;
}

export function requiredPath(q: Query): string {
  const p = one(q, 'path');
  if (!p) throw new InvalidArgumentError('path is required');
  if (!p.startsWith('/')) throw new InvalidArgumentError(`path must be absolute, got ${JSON.stringify(p)}`);
  return p;
}

export { optUint, one as queryOne };
