import { randomBytes } from 'node:crypto';
import type { EgressSecretBinding, EgressSecretSpec } from '../../domain/egress-secrets.js';
import { MAX_EGRESS_SECRETS, parseEgressSecretSpec } from '../../domain/egress-secrets.js';
import { InvalidArgumentError, NotSupportedError } from '../../domain/errors.js';
import { parseCidr } from '../../domain/ip.js';
import type { SvcClient } from '../client/svc-client.js';
import { TEAM_SECRET } from './team-secrets.js';

/**
 * One header E2B's `network.rules` put on requests to `host` (a name or `*.name`). A value that
 * names one of the team's secrets (`${e2b.secrets.NAME}`, team-secrets.ts) has it in `secret`:
 * that secret's host secret is bound, the value around the placeholder its format.
 */
export interface HeaderRule {
  host: string;
  header: string;
  value: string;
  secret?: string;
}

/** `${e2b.secrets.NAME}` in a rule's header value (the SDK's `Secret.fill(NAME)`). */
const SECRET_REF = /\$\{e2b\.secrets\.([^{}]+)\}/g;
/** `${e2b.sandboxId}`: the sandbox's id, put in when the rules are bound. */
const SANDBOX_ID = '${e2b.sandboxId}';

/** The host secrets that hold rules' values: `e2b.<the sandbox's hex>.<random hex>`. */
const RULE_SECRET = /^e2b\.[0-9a-f]{12}\.[0-9a-f]{8}$/;

/** Is this binding one of E2B's header rules (not an egress secret bound by svc's own API)? */
export const isRuleBinding = (b: EgressSecretBinding) =>
  b.always === true && (RULE_SECRET.test(b.secret) || TEAM_SECRET.test(b.secret));

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * E2B's `network.rules` (`{"api.example.com": [{transform: {headers: {...}}}]}`) as the headers
 * they set: one per host and header, a later rule's header over an earlier one's of the same name.
 * Addresses as keys are refused (svc sets headers by the name a connection shows).
 */
export function headerRulesFromE2b(rules: unknown): HeaderRule[] {
  if (rules === undefined || rules === null) return [];
  if (!isObject(rules)) throw new InvalidArgumentError('network.rules must be an object of host: [rules]');
  const out: HeaderRule[] = [];
  for (const [key, list] of Object.entries(rules)) {
    const host = key.trim().toLowerCase();
    if (host === '*')
      throw new InvalidArgumentError('network.rules: a bare "*" is not a host; name one (*.example.com)');
    if (parseCidr(host.replace(/^\*\./, '')))
      throw new NotSupportedError(
        `network.rules["${key}"]: svc sets headers by host name (the name TLS or Host shows), not by address`,
      );
    if (!Array.isArray(list)) throw new InvalidArgumentError(`network.rules["${key}"] must be a list of rules`);
    const headers = new Map<string, { header: string; value: string }>();
    for (const [i, rule] of list.entries()) {
      const where = `network.rules["${key}"][${i}]`;
      if (!isObject(rule)) throw new InvalidArgumentError(`${where} must be an object {transform}`);
      const t = rule.transform;
      if (t === undefined || t === null) continue;
      if (!isObject(t) || (t.headers !== undefined && !isObject(t.headers)))
        throw new InvalidArgumentError(`${where}.transform must be {headers: {name: value}}`);
      for (const [header, value] of Object.entries((t.headers ?? {}) as Record<string, unknown>)) {
        if (typeof value !== 'string' || /[\r\n\0]/.test(value))
          throw new InvalidArgumentError(`${where}.transform.headers.${header} must be one line of text`);
        const refs = [...value.matchAll(SECRET_REF)];
        if (refs.length > 1)
          throw new InvalidArgumentError(`${where}.transform.headers.${header}: a header takes one secret`);
        headers.set(header.toLowerCase(), { header, value, ...(refs.length ? { secret: refs[0][1] } : {}) });
      }
    }
    for (const h of headers.values()) out.push({ host, ...h });
  }
  if (out.length > MAX_EGRESS_SECRETS)
    throw new InvalidArgumentError(`network.rules: at most ${MAX_EGRESS_SECRETS} headers in all`);
  // Names and headers checked the way svc's own bindings are (a reserved header, a name that is not one).
  for (const r of out)
    parseEgressSecretSpec(
      { secret: 'e2b', hosts: [r.host], header: r.header, always: true },
      `network.rules["${r.host}"]`,
    );
  return out;
}

/** What `getInfo` shows of a sandbox's rules: hosts and header names, values hidden (svc echoes no secret). */
export function e2bRulesOf(bindings: EgressSecretBinding[] | undefined): Record<string, unknown[]> {
  const out: Record<string, { transform: { headers: Record<string, string> } }[]> = {};
  for (const b of bindings ?? [])
    if (isRuleBinding(b) && b.header) {
      const host = b.hosts[0];
      const entry = (out[host] ??= [{ transform: { headers: {} } }]);
      entry[0].transform.headers[b.header] = '(kept by svc)';
    }
  return out;
}

/** The rules of sandbox `id` with its id put in, and the values of those that name no team secret (to keep as secrets). */
export function ruleValues(rules: HeaderRule[], id: string): { rules: HeaderRule[]; values: string[] } {
  const out = rules.map((r) => ({ ...r, value: r.value.split(SANDBOX_ID).join(id) }));
  return { rules: out, values: out.filter((r) => !r.secret).map((r) => r.value) };
}

/**
 * The `always` bindings that put `rules`' headers in: a plain value held in the next of `made`
 * (one each, in order), a team secret's through its host secret (`teamSecret`), the text around
 * its placeholder the binding's format.
 */
export async function ruleSpecs(
  rules: HeaderRule[],
  made: string[],
  teamSecret: (name: string) => Promise<string>,
): Promise<EgressSecretSpec[]> {
  let next = 0;
  const out: EgressSecretSpec[] = [];
  for (const r of rules) {
    const base = { hosts: [r.host], header: r.header, always: true };
    if (!r.secret) out.push({ ...base, secret: made[next++] });
    else {
      const secret = await teamSecret(r.secret);
      if (out.some((b) => b.secret === secret))
        throw new InvalidArgumentError(
          `network.rules: secret ${JSON.stringify(r.secret)} is named in two headers; svc binds a secret to one header of a sandbox`,
        );
      const format = r.value.replace(SECRET_REF, '{value}');
      out.push({ ...base, secret, ...(format === '{value}' ? {} : { format }) });
    }
  }
  return out;
}

/**
 * The values E2B gives to svc's network, each kept as a host secret of its own (sealed like every
 * secret): a header rule's value, bound to the sandbox as an `always` egress secret (svc-netd sets
 * the header on requests to its host), and a SOCKS proxy's password, which the sandbox's policy
 * names. The guest never holds either (docs/e2b.md). A secret no VM uses any more (its sandbox and
 * every copy of it gone, or rules replaced) is removed by `sweep`.
 */
export class RuleSecrets {
  /** Secrets made for a create or an update that has not bound them yet: a sweep leaves them. */
  private readonly pending = new Set<string>();
  private sweeping: Promise<void> | undefined;
  private again = false;

  constructor(private readonly client: SvcClient) {}

  /**
   * Makes a secret for each value and runs `bind` with their names, in order (a create, a PUT);
   * when it fails, the secrets are removed again and its error thrown.
   */
  async bound<T>(sandbox: string, values: string[], bind: (secrets: string[]) => Promise<T>): Promise<T> {
    const secrets = await this.make(sandbox, values);
    try {
      const out = await bind(secrets);
      await this.done(secrets, false);
      return out;
    } catch (err) {
      await this.done(secrets, true);
      throw err;
    }
  }

  private async make(sandbox: string, values: string[]): Promise<string[]> {
    const hex = sandbox.replace(/^e2b-/, '');
    const secrets: string[] = [];
    for (const value of values) {
      const secret = `e2b.${hex}.${randomBytes(4).toString('hex')}`;
      this.pending.add(secret);
      secrets.push(secret);
      try {
        await this.client.setSecret({ name: secret, value, mode: '0600' });
      } catch (err) {
        await this.done(secrets, true);
        throw err;
      }
    }
    return secrets;
  }

  /** The create or PUT that was to use `secrets` is over: done, or failed (`drop` removes them). */
  private async done(secrets: string[], drop: boolean): Promise<void> {
    // A sweep under way may have listed the VMs before this create: it must still leave these.
    const forget = () => secrets.forEach((s) => this.pending.delete(s));
    if (this.sweeping) void this.sweeping.then(forget, forget);
    else forget();
    if (drop) for (const s of secrets) await this.client.deleteSecret(s).catch(() => undefined);
  }

  /** Removes E2B's secrets no VM uses. Calls that come while one runs make one more run after it. */
  sweep(): Promise<void> {
    if (this.sweeping) {
      this.again = true;
      return this.sweeping;
    }
    this.sweeping = (async () => {
      do {
        this.again = false;
        const [secrets, vms] = await Promise.all([this.client.listSecrets(), this.client.list()]);
        const bound = new Set(
          vms.flatMap((vm) => [
            ...(vm.egress_secrets ?? []).map((b) => b.secret),
            ...(vm.egress.proxy?.secret ? [vm.egress.proxy.secret] : []),
          ]),
        );
        for (const s of secrets)
          if (RULE_SECRET.test(s.name) && !bound.has(s.name) && !this.pending.has(s.name))
            await this.client.deleteSecret(s.name).catch(() => undefined);
      } while (this.again);
    })().finally(() => (this.sweeping = undefined));
    return this.sweeping;
  }
}
