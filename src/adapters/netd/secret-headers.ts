import {
  alwaysFor,
  hostMatches,
  PLACEHOLDER_PREFIX,
  placeholdersOf,
  type EgressSecretBinding,
} from '../../domain/egress-secrets.js';
import { normalName } from '../../domain/egress.js';
import type { EgressEntry } from './egress-guard.js';

/** Where svc-netd reads the values (the daemon's secret store); a rotated value is read on the next request. */
export interface SecretValues {
  /** The secret's value, or undefined when there is no such secret (any more). */
  value(secret: string): Promise<Buffer | undefined>;
}

/** A request's headers with the secrets in, or why it is refused (its status and message). */
export type Rewritten =
  | { ok: true; headers: [string, string][]; injected: string[] }
  | { ok: false; status: number; error: string; secret: string };

/** What a rewrite reads: a VM's bindings now, where their values are, and where it logs. */
export interface SecretsAt {
  bindings: EgressSecretBinding[];
  values: SecretValues;
  audit(e: EgressEntry): void;
}

/** The connection a request came on: the name it showed, and where it goes (for the log). */
export interface ConnectionTo {
  name: string;
  addr: string;
  to: { port: number };
}

/** `host[:port]` or `[v6]:port` without its port. */
const hostOnly = (hostPort: string) =>
  hostPort.startsWith('[') ? hostPort.slice(1, hostPort.indexOf(']')) : hostPort.replace(/:\d+$/, '');

/**
 * A request's headers with the secrets put in: a header holding a binding's placeholder, on a
 * request to a host the binding is for (its Host or :authority must name the connection's host)
 * and in the binding's header if it names one, gets the value (in `format`, if given). A
 * placeholder anywhere else in the headers or the target refuses the request (403, logged).
 * Then the `always` bindings of the host's most specific pattern set their headers.
 */
export async function putSecrets(
  o: SecretsAt,
  c: ConnectionTo,
  headers: [string, string][],
  target: string,
  host: string | undefined,
): Promise<Rewritten> {
  const name = normalName(c.name);
  const sameHost = host !== undefined && normalName(hostOnly(host)) === name;
  const forHere = (b: EgressSecretBinding, header: string) =>
    sameHost && b.hosts.some((p) => hostMatches(p, name)) && (!b.header || b.header.toLowerCase() === header);
  const deny = (b: EgressSecretBinding, where: string): Rewritten => {
    o.audit({
      event: 'deny',
      proto: 'tcp',
      addr: c.addr,
      port: c.to.port,
      name: host ? hostOnly(host) : name,
      decision: 'deny',
      rule: 'egress-secret',
      secret: b.secret,
      error: `its placeholder in ${where}`,
    });
    return {
      ok: false,
      status: 403,
      secret: b.secret,
      error: `svc egress: the placeholder of secret ${b.secret} may not go to ${host ?? name} in ${where} (it is for ${b.hosts.join(', ')}${b.header ? `, in ${b.header}` : ''})`,
    };
  };
  if (target.includes(PLACEHOLDER_PREFIX))
    for (const b of o.bindings)
      if (placeholdersOf(b).some((p) => target.includes(p))) return deny(b, 'the request target');
  const out: [string, string][] = [];
  const injected = new Set<string>();
  for (const [k, v] of headers) {
    if (!v.includes(PLACEHOLDER_PREFIX)) {
      out.push([k, v]);
      continue;
    }
    let value = v;
    for (const b of o.bindings) {
      const held = placeholdersOf(b).filter((p) => value.includes(p));
      if (!held.length) continue;
      if (!forHere(b, k.toLowerCase())) return deny(b, `header ${k}`);
      const secret = await valueOf(o, b);
      if (typeof secret !== 'string') return secret;
      value = b.format ? b.format.split('{value}').join(secret) : held.reduce((v, p) => v.split(p).join(secret), value);
      injected.add(b.secret);
    }
    out.push([k, value]);
  }
  // Headers put on every request to this host, whatever the guest sent in them.
  for (const b of sameHost ? alwaysFor(o.bindings, name) : []) {
    const secret = await valueOf(o, b);
    if (typeof secret !== 'string') return secret;
    const header = b.header!;
    const lower = header.toLowerCase();
    for (let i = out.length - 1; i >= 0; i--) if (out[i][0].toLowerCase() === lower) out.splice(i, 1);
    out.push([header, b.format ? b.format.split('{value}').join(secret) : secret]);
    injected.add(b.secret);
  }
  for (const secret of injected)
    o.audit({
      event: 'secret',
      proto: 'tcp',
      addr: c.addr,
      port: c.to.port,
      name,
      decision: 'allow',
      rule: 'egress-secret',
      secret,
    });
  return { ok: true, headers: out, injected: [...injected] };
}

/** A secret's value as a header can carry it (one trailing newline dropped), or the refusal. */
async function valueOf(o: SecretsAt, b: EgressSecretBinding): Promise<string | Rewritten> {
  const v = await o.values.value(b.secret).catch(() => undefined);
  const text = v?.toString('utf8').replace(/\r?\n$/, '');
  if (text === undefined || /[\r\n\0]/.test(text)) {
    const why = text === undefined ? 'there is no such secret' : 'its value has a line break';
    o.audit({
      event: 'deny',
      proto: 'tcp',
      name: b.hosts[0],
      decision: 'deny',
      rule: 'egress-secret',
      secret: b.secret,
      error: why,
    });
    return {
      ok: false,
      status: 502,
      secret: b.secret,
      error: `svc egress: secret ${b.secret} cannot be sent: ${why}`,
    };
  }
  return text;
}
