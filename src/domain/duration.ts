import { InvalidArgumentError } from './errors.js';

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/**
 * Parses Go-style durations such as `90s`, `3m`, `1h30m`, `500ms`. A bare number is seconds.
 * Returns milliseconds. `what` names the field in the error message.
 */
export function parseDuration(text: string, what: string): number {
  const trimmed = text.trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Math.round(Number(trimmed) * 1000);
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
  return Math.round(total);
}

export function formatDuration(ms: number): string {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}
