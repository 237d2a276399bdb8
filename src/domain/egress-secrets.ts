import { HOST_NAME, normalName } from './egress.js';
import { InvalidArgumentError } from './errors.js';
import { assertSecretName, isObject } from './names.js';

/**
 * A host secret bound to a VM for its egress (docs/egress-secrets.md): the guest holds a
 * placeholder, and the egress path puts the value in its place on requests to `hosts` only.
 */
export interface EgressSecretBinding {
  /** The host secret's name (`POST /secrets`). */
  secret: string;
  /** Names the value may go to: `api.openai.com`, `*.example.com` (names under it), `host.svc.internal`. */
  hosts: string[];
  /** Only this request header carries the value (case does not matter); default: any header that holds the placeholder. */
  header?: string;
  /** What the header becomes, `{value}` the secret (`Bearer {value}`); default: the header as sent, the placeholder replaced. */
  format?: string;
  /** The guest environment variable that holds the placeholder (processes svc starts). */
  env?: string;
  /**
   * Put `header` on every request to `hosts`, whether or not the guest sent the placeholder (one it
   * sent of that name is replaced): a header the guest never sees. No variable is set in the guest.
   * Of the `always` bindings a request's host matches, only those of the most specific pattern
   * apply (an exact name, else the longest `*.` suffix), as E2B's `network.rules` decide.
   */
  always?: boolean;
  /** The stand-in the guest sees: random per VM and binding, never the value. */
  placeholder: string;
  /**
   * Placeholders of the VMs this one was copied from (a clone, a fork, a pool claim), still put in
   * place: the processes that came with the copy hold them. The guest's variables hold `placeholder`.
   */
  inherited?: string[];
}

/** What a create or a PUT gives: a binding without its placeholder (svc makes it). */
export type EgressSecretSpec = Omit<EgressSecretBinding, 'placeholder' | 'inherited'>;

/** Placeholders a copy of a copy still honours, at most. */
const MAX_INHERITED = 8;

export const MAX_EGRESS_SECRETS = 32;
const MAX_HOSTS = 64;
/** Every placeholder starts with this, so the egress path finds one in any bytes cheaply. */
export const PLACEHOLDER_PREFIX = 'svc-egress-';
const PLACEHOLDER_RE = /^svc-egress-[0-9a-f]{40}$/;
const LABEL = /^(?!-)[a-z0-9_-]{1,63}(?<!-)$/;
const HEADER = /^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$/;
const ENV = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
/** Headers the egress path owns: a value there would change how the request is framed or routed. */
const RESERVED_HEADERS = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'upgrade', 'te']);

/** A placeholder made of 20 random bytes (the caller's, so that this module does no I/O). */
export const placeholderOf = (random: Uint8Array) =>
  PLACEHOLDER_PREFIX + Array.from(random.subarray(0, 20), (b) => b.toString(16).padStart(2, '0')).join('');

function hostName(raw: unknown, where: string): string {
  if (typeof raw !== 'string' || !raw) throw new InvalidArgumentError(`${where}: a host must be a non-empty name`);
  const name = normalName(raw.trim());
  const bare = name.startsWith('*.') ? name.slice(2) : name;
  const labels = bare.split('.');
  if (bare.length > 253 || !labels.every((l) => LABEL.test(l)) || /^\d+$/.test(labels[labels.length - 1]))
    throw new InvalidArgumentError(
      `${where}: host ${JSON.stringify(raw)} is not a domain name (api.example.com, *.example.com or ${HOST_NAME}; no port, no address)`,
    );
  return name;
}

/** Does `host` (a name a connection showed) fall under `pattern` (`*.x` names under x only)? */
export function hostMatches(pattern: string, host: string): boolean {
  const name = normalName(host);
  return pattern.startsWith('*.') ? name.endsWith(pattern.slice(1)) : name === pattern;
}

/** Validates one binding as a request gives it (no placeholder: svc makes it). */
export function parseEgressSecretSpec(v: unknown, where: string): EgressSecretSpec {
  if (!isObject(v))
    throw new InvalidArgumentError(`${where} must be an object {secret, hosts, header?, format?, env?, always?}`);
  for (const k of Object.keys(v))
    if (!['secret', 'hosts', 'header', 'format', 'env', 'always'].includes(k))
      throw new InvalidArgumentError(`${where}: unknown field "${k}"`);
  const secret = assertSecretName(v.secret);
  if (!Array.isArray(v.hosts) || v.hosts.length === 0 || v.hosts.length > MAX_HOSTS)
    throw new InvalidArgumentError(`${where}.hosts must be a list of 1 to ${MAX_HOSTS} host names`);
  const hosts = [...new Set(v.hosts.map((h, i) => hostName(h, `${where}.hosts[${i}]`)))];
  const out: EgressSecretSpec = { secret, hosts };
  if (v.header !== undefined) {
    if (typeof v.header !== 'string' || !HEADER.test(v.header))
      throw new InvalidArgumentError(`${where}.header must be an HTTP header name such as "Authorization"`);
    if (RESERVED_HEADERS.has(v.header.toLowerCase()))
      throw new InvalidArgumentError(`${where}.header: ${v.header} cannot carry a secret`);
    out.header = v.header;
  }
  if (v.format !== undefined) {
    if (out.header === undefined) throw new InvalidArgumentError(`${where}.format needs a header`);
    if (
      typeof v.format !== 'string' ||
      !v.format.includes('{value}') ||
      v.format.length > 200 ||
      /[\r\n]/.test(v.format)
    )
      throw new InvalidArgumentError(`${where}.format must be one line of at most 200 characters with {value} in it`);
    out.format = v.format;
  }
  if (v.env !== undefined) {
    if (typeof v.env !== 'string' || !ENV.test(v.env))
      throw new InvalidArgumentError(`${where}.env must be an environment variable name such as OPENAI_API_KEY`);
    out.env = v.env;
  }
  if (v.always !== undefined && v.always !== false) {
    if (v.always !== true) throw new InvalidArgumentError(`${where}.always must be true or false`);
    if (out.header === undefined) throw new InvalidArgumentError(`${where}.always needs a header to put the value in`);
    if (out.env !== undefined)
      throw new InvalidArgumentError(`${where}.env: an always binding puts no placeholder in the guest`);
    out.always = true;
  }
  return out;
}

/** Validates a list of bindings (`CreateRequest.egress_secrets`, the PUT's body): unique secrets and variables. */
export function parseEgressSecretSpecs(v: unknown, where = 'egress_secrets'): EgressSecretSpec[] {
  if (!Array.isArray(v) || v.length > MAX_EGRESS_SECRETS)
    throw new InvalidArgumentError(`${where} must be a list of at most ${MAX_EGRESS_SECRETS} bindings`);
  const specs = v.map((s, i) => parseEgressSecretSpec(s, `${where}[${i}]`));
  const seen = new Set<string>();
  for (const s of specs) {
    if (seen.has(s.secret)) throw new InvalidArgumentError(`${where}: secret ${s.secret} is bound twice`);
    seen.add(s.secret);
  }
  const envs = specs.map((s) => s.env).filter((e): e is string => e !== undefined);
  const dup = envs.find((e, i) => envs.indexOf(e) !== i);
  if (dup) throw new InvalidArgumentError(`${where}: two bindings set ${dup}`);
  return specs;
}

/**
 * Bindings with placeholders: a binding of a secret the VM had keeps its placeholder (the guest's
 * programs hold it), a new one gets a new one. `fresh` makes every placeholder new (a clone or
 * fork); a binding given with a placeholder (the template's) then passes it on as inherited.
 */
export function bindEgressSecrets(
  specs: (EgressSecretSpec | EgressSecretBinding)[],
  random: (bytes: number) => Uint8Array,
  had: EgressSecretBinding[] = [],
  fresh = false,
): EgressSecretBinding[] {
  return specs.map((s) => {
    const { placeholder: from, inherited = [], ...spec } = s as Partial<EgressSecretBinding> & EgressSecretSpec;
    const old = fresh ? undefined : had.find((h) => h.secret === s.secret);
    if (old) return { ...spec, placeholder: old.placeholder, ...(old.inherited ? { inherited: old.inherited } : {}) };
    const passed = from ? [...inherited, from].slice(-MAX_INHERITED) : [];
    return { ...spec, placeholder: placeholderOf(random(20)), ...(passed.length ? { inherited: passed } : {}) };
  });
}

/** A binding as a PUT gives it back: svc keeps the placeholder (and what it inherited) of a secret the VM has. */
export function specOf(b: EgressSecretBinding): EgressSecretSpec {
  const { placeholder: _p, inherited: _i, ...spec } = b;
  return spec;
}

/** Every placeholder a binding puts its value in place of: its own and those it inherited. */
export const placeholdersOf = (b: EgressSecretBinding) => [b.placeholder, ...(b.inherited ?? [])];

/** Reads back bindings a VM record or netd state kept (placeholders checked). */
export function parseEgressSecretBindings(v: unknown, where = 'egress_secrets'): EgressSecretBinding[] {
  if (!Array.isArray(v)) throw new InvalidArgumentError(`${where} must be a list`);
  return v.map((b, i) => {
    const p = isObject(b) ? b.placeholder : undefined;
    if (typeof p !== 'string' || !PLACEHOLDER_RE.test(p))
      throw new InvalidArgumentError(`${where}[${i}].placeholder is not a placeholder`);
    const inherited = isObject(b) ? b.inherited : undefined;
    if (
      inherited !== undefined &&
      (!Array.isArray(inherited) ||
        inherited.length > MAX_INHERITED ||
        !inherited.every((x) => typeof x === 'string' && PLACEHOLDER_RE.test(x)))
    )
      throw new InvalidArgumentError(`${where}[${i}].inherited is not a list of placeholders`);
    const rest = { ...(b as Record<string, unknown>) };
    delete rest.placeholder;
    delete rest.inherited;
    return {
      ...parseEgressSecretSpec(rest, `${where}[${i}]`),
      placeholder: p,
      ...(inherited ? { inherited: inherited as string[] } : {}),
    };
  });
}

/** The guest's variables: each binding's `env` (or the secret's name upper-cased) set to its placeholder; `always` ones set none. */
export function egressEnv(bindings: EgressSecretBinding[]): Record<string, string> {
  return Object.fromEntries(
    bindings.filter((b) => !b.always).map((b) => [b.env ?? defaultEnvName(b.secret), b.placeholder]),
  );
}

/**
 * How closely `pattern` names `host`: an exact name beats any `*.` pattern, a longer suffix a
 * shorter one; -1 when it does not match.
 */
export function matchRank(pattern: string, host: string): number {
  if (!hostMatches(pattern, host)) return -1;
  return pattern.startsWith('*.') ? pattern.length : Number.MAX_SAFE_INTEGER;
}

/** The `always` bindings a request to `host` gets: those of the most specific pattern that matches it. */
export function alwaysFor(bindings: EgressSecretBinding[], host: string): EgressSecretBinding[] {
  const ranked = bindings
    .filter((b) => b.always)
    .map((b) => ({ b, rank: Math.max(...b.hosts.map((h) => matchRank(h, host))) }))
    .filter((x) => x.rank >= 0);
  const best = Math.max(...ranked.map((x) => x.rank));
  return ranked.filter((x) => x.rank === best).map((x) => x.b);
}

export const defaultEnvName = (secret: string) => secret.toUpperCase().replace(/[^A-Z0-9_]/g, '_');
