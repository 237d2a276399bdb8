import { posix } from 'node:path';
import type { Request } from 'express';
import { InvalidArgumentError } from '../../domain/errors.js';
import type { Instance } from '../../domain/vm.js';
import { E2B_HOME, guestUser } from './sandboxes.js';

/** Where E2B_SANDBOX_URL points on the daemon's listener: E2B's in-sandbox API (envd-routes.ts). */
export const ENVD_BASE = '/e2b/envd';

/** What the envd services need of a call: its sandbox, running (envd-routes.ts). */
export interface EnvdCalls {
  /** The running sandbox an envd call names (`E2b-Sandbox-Id`), woken when it auto-resumes. */
  runningVm(req: Request): Promise<Instance>;
  /** Its VM's name. */
  vmOf(req: Request): Promise<string>;
}

/** Where E2B's relative paths start: its default user's home (sandboxes.ts). */
export const abs = (p: unknown): string => {
  if (typeof p !== 'string' || !p) throw new InvalidArgumentError('path is required');
  return posix.resolve(E2B_HOME, p);
};

/** E2B's `Authorization: Basic base64(user:)`, as the guest's user (sandboxes.ts, guestUser). */
export function userOf(req: Request): string | undefined {
  const m = /^Basic (.+)$/.exec(req.headers.authorization ?? '');
  return guestUser(m ? Buffer.from(m[1], 'base64').toString('utf8').split(':')[0] : '');
}

/** How often a stream says it is alive: E2B's `Keepalive-Ping-Interval` (seconds), 50 by default. */
export function keepaliveMs(req: Request): number {
  const s = Number(req.headers['keepalive-ping-interval'] ?? 50);
  return Number.isFinite(s) && s >= 1 ? Math.min(s, 300) * 1000 : 50_000;
}

/** A wait that gives way to a keepalive: resolves with the next item, or `'tick'` after `ms`. */
export async function nextOrTick<T>(it: AsyncIterator<T>, pending: { p?: Promise<IteratorResult<T>> }, ms: number) {
  pending.p ??= it.next();
  let timer: NodeJS.Timeout | undefined;
  const tick = new Promise<'tick'>((r) => (timer = setTimeout(() => r('tick'), ms)));
  const r = await Promise.race([pending.p, tick]);
  clearTimeout(timer);
  if (r === 'tick') return 'tick' as const;
  pending.p = undefined;
  return r;
}
