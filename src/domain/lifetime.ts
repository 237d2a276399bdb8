import { parseDuration } from './duration.js';
import { InvalidArgumentError, shown } from './errors.js';

/**
 * A VM's lifetime (docs/api.md, "Lifetime"): at `expires_at` the daemon deletes it, or suspends it
 * when `on_expire` is `suspend` (then the time is spent: a restored VM runs until told otherwise).
 */
export type OnExpire = 'delete' | 'suspend';
export const ON_EXPIRE: readonly OnExpire[] = ['delete', 'suspend'];

/** The longest life given at once: 24 days, as every duration here (docs/decisions.md); a VM meant to live longer has no ttl. */
export const MAX_TTL_MS = 24 * 86_400_000;

function tryDuration(text: string): number {
  try {
    return parseDuration(text, 'ttl');
  } catch {
    return NaN;
  }
}

/** A ttl as a request gives it: whole seconds, or a duration (`90s`, `30m`, `1h30m`), from 1 s to 24 days. */
export function parseTtl(v: unknown, field = 'ttl'): number {
  let ms = NaN;
  if (typeof v === 'number' && Number.isInteger(v)) ms = v * 1000;
  else if (typeof v === 'string' && v.trim() !== '') ms = tryDuration(v);
  if (!(ms >= 1000 && ms <= MAX_TTL_MS))
    throw new InvalidArgumentError(
      `${field} must be whole seconds or a duration such as 30m, from 1s to 24 days, got ${shown(v)}`,
    );
  return ms;
}

export function parseOnExpire(v: unknown, field = 'on_expire'): OnExpire {
  if (typeof v !== 'string' || !(ON_EXPIRE as readonly string[]).includes(v))
    throw new InvalidArgumentError(`${field} must be delete or suspend, got ${shown(v)}`);
  return v as OnExpire;
}

/** A lifetime change: a ttl from now, or `null` to live until deleted. */
export interface LifetimeChange {
  ttl_ms: number | null;
  on_expire?: OnExpire;
}

/** The body of `PUT /vms/{name}/ttl`: `{ttl: 1800 | "30m" | null, on_expire?}`. */
export function parseLifetimeChange(body: unknown): LifetimeChange {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new InvalidArgumentError('ttl body must be a JSON object such as {"ttl": "30m"}');
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b))
    if (k !== 'ttl' && k !== 'on_expire') throw new InvalidArgumentError(`unknown field "${k}" in ttl request`);
  if (!('ttl' in b)) throw new InvalidArgumentError('ttl is required: a duration, whole seconds, or null for none');
  return {
    ttl_ms: b.ttl === null ? null : parseTtl(b.ttl),
    ...(b.on_expire !== undefined ? { on_expire: parseOnExpire(b.on_expire) } : {}),
  };
}

/** The lifetime fields of a VM made by `req` at `now` (none without a ttl). */
export function lifetimeOf(
  req: { ttl_ms?: number; on_expire?: OnExpire },
  now: number,
): { expires_at?: string; on_expire?: OnExpire } {
  if (req.ttl_ms === undefined) return {};
  return { expires_at: new Date(now + req.ttl_ms).toISOString(), on_expire: req.on_expire ?? 'delete' };
}
