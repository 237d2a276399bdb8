import { parseDuration } from '../domain/duration.js';
import { ConfigError, type ConfigKind, type ConfigSection } from './config-shape.js';

/** A key's value as its kind wants it; `fromEnv`: given as text in the environment. Throws ConfigError naming the key. */
export function coerce(key: string, kind: ConfigKind, value: unknown, fromEnv: boolean): unknown {
  const bad = (what: string) => new ConfigError(`config key "${key}": ${what}, got ${JSON.stringify(value)}`);
  if (typeof kind === 'object') {
    if (typeof value !== 'string' || !kind.oneOf.includes(value)) throw bad(`must be one of ${kind.oneOf.join('|')}`);
    return value;
  }
  switch (kind) {
    case 'string':
      if (typeof value !== 'string') throw bad('must be a string');
      return value;
    case 'list': {
      // A YAML list of strings, or in the environment one comma-separated string.
      const items =
        fromEnv && typeof value === 'string'
          ? value
              .split(',')
              .map((x) => x.trim())
              .filter(Boolean)
          : value;
      if (!Array.isArray(items) || items.some((x) => typeof x !== 'string' || x === ''))
        throw bad('must be a list of non-empty strings');
      return items;
    }
    case 'bool':
      if (fromEnv && typeof value === 'string' && /^(true|false|1|0)$/.test(value))
        return value === 'true' || value === '1';
      if (typeof value !== 'boolean') throw bad('must be true or false');
      return value;
    case 'int': {
      const n = fromEnv && typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value;
      if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) throw bad('must be a non-negative integer');
      return n;
    }
    case 'duration':
      if (typeof value !== 'string' && typeof value !== 'number') throw bad('must be a duration such as 90s');
      try {
        return parseDuration(String(value), key);
      } catch {
        throw bad('must be a duration such as 90s or 3m');
      }
  }
}

/** Reads a driver's section: its mapping, `SVC_<SECTION>_<KEY>`, its old flat keys (taken out of `rest`). */
export function readSection(
  spec: ConfigSection,
  raw: Record<string, unknown>,
  rest: Record<string, unknown>,
  env: NodeJS.ProcessEnv,
): Record<string, unknown> {
  const given = raw[spec.name] ?? {};
  if (typeof given !== 'object' || given === null || Array.isArray(given))
    throw new ConfigError(
      `config key "${spec.name}": must be a mapping of its keys (${Object.keys(spec.keys).join(', ')})`,
    );
  const values: Record<string, unknown> = { ...(given as Record<string, unknown>) };
  for (const k of Object.keys(values)) {
    if (!(k in spec.keys))
      throw new ConfigError(
        `config key "${spec.name}.${k}": unknown key (known: ${Object.keys(spec.keys).join(', ')})`,
      );
  }
  for (const [old, key] of Object.entries(spec.aliases ?? {})) {
    if (!(old in rest)) continue;
    if (key in values) throw new ConfigError(`config key "${old}": given twice (it is ${spec.name}.${key})`);
    values[key] = rest[old];
    delete rest[old];
  }
  const out: Record<string, unknown> = {};
  for (const [key, [kind, def]] of Object.entries(spec.keys)) {
    const alias = Object.entries(spec.aliases ?? {}).find(([, k]) => k === key)?.[0];
    const envKey = [`SVC_${spec.name}_${key}`.toUpperCase(), ...(alias ? [`SVC_${alias.toUpperCase()}`] : [])].find(
      (k) => env[k] !== undefined,
    );
    if (envKey) out[key] = coerce(envKey, kind, env[envKey], true);
    else out[key] = coerce(`${spec.name}.${key}`, kind, key in values ? values[key] : def, false);
  }
  return out;
}
