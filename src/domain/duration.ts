import { InvalidArgumentError } from './errors.js';

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/**
 * Parses Go-style durations such as `90s`, `3m`, `1h30m`, `500ms`. A bare number is seconds.
 * Returns milliseconds. `what` names the field in the error message.
 */
export function parseDuration(text: string, what: string): number {
  const trimmed = text.trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) return bounded(Math.round(Number(trimmed) * 1000), text, what);
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/gy;
  let total = 0;
  let consumed = 0;
  for (let m = re.exec(trimmed); m; m = re.exec(trimmed)) {
    total += Number(m[1]) * UNIT_MS[m[2]];
    consumed = re.lastIndex;
  }
  if (trimmed === '' || consumed !== trimmed.length) {
    throw new InvalidArgumentError(`${what}: invalid duration "${text}" (use forms like 90s, 3m, 1h30m)`);
  }
  return bounded(Math.round(total), text, what);
}

/** The longest wait a timer can hold (Node's, 2^31-1 ms, about 24.8 days); longer would fire at once. */
export const MAX_DURATION_MS = 2 ** 31 - 1;

function bounded(ms: number, text: string, what: string): number {
  if (!Number.isFinite(ms) || ms > MAX_DURATION_MS)
    throw new InvalidArgumentError(`${what}: ${text} is longer than svc can time (at most 24 days)`);
  return ms;
}

export function formatDuration(ms: number): string {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}
