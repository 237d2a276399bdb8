import { parseCreateRequest } from './create-request.js';
import { InvalidArgumentError } from './errors.js';
import { assertNewVmName, VM_NAME_RE } from './names.js';

/** `POST /vms/{name}/fork`: how many forks, their names, and what each is given. */
export interface ForkRequest {
  count: number;
  /** One per fork when given (then `count` is their number). */
  names?: string[];
  tags: Record<string, string>;
  persistent: boolean;
}

/** The most forks one call makes (E2B's own limit). */
export const MAX_FORKS = 100;
const FIELDS = new Set(['count', 'names', 'tags', 'persistent']);

/** Checks a fork request whole, before anything is captured. InvalidArgumentError says what is wrong. */
export function parseForkRequest(body: unknown): ForkRequest {
  if (body === undefined || body === null) body = {};
  if (typeof body !== 'object' || Array.isArray(body))
    throw new InvalidArgumentError('fork body must be a JSON object');
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b))
    if (!FIELDS.has(k)) throw new InvalidArgumentError(`unknown field "${k}" in fork request`);
  // Tags and persistence mean what they mean on a create, checked by the same rules.
  const { tags, persistent } = parseCreateRequest({ tags: b.tags, persistent: b.persistent });
  let names: string[] | undefined;
  if (b.names !== undefined) {
    if (!Array.isArray(b.names) || b.names.length === 0 || b.names.length > MAX_FORKS)
      throw new InvalidArgumentError(`names must be an array of 1 to ${MAX_FORKS} vm names`);
    names = b.names.map((n) => assertNewVmName(n));
    const twice = names.find((n, i) => names!.indexOf(n) !== i);
    if (twice) throw new InvalidArgumentError(`names: ${twice} is given twice`);
  }
  let count = names?.length ?? 1;
  if (b.count !== undefined) {
    if (typeof b.count !== 'number' || !Number.isInteger(b.count) || b.count < 1 || b.count > MAX_FORKS)
      throw new InvalidArgumentError(`count must be an integer from 1 to ${MAX_FORKS}, got ${JSON.stringify(b.count)}`);
    if (names && b.count !== names.length)
      throw new InvalidArgumentError(`count is ${b.count} but ${names.length} names are given`);
    count = b.count;
  }
  return { count, names, tags, persistent };
}

/** Names for `count` forks of `source`: `<source>-fork-N` (`fork-N` after a long name) for the first N not taken. */
export function forkNames(source: string, count: number, taken: (name: string) => boolean): string[] {
  const base = VM_NAME_RE.test(`${source}-fork-1000`) ? `${source}-fork` : 'fork';
  const out: string[] = [];
  for (let k = 1; out.length < count; k++) if (!taken(`${base}-${k}`)) out.push(`${base}-${k}`);
  return out;
}
