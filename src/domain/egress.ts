import { InvalidArgumentError } from './errors.js';
import { isHostName, isObject } from './names.js';
import { parseEgressProxy, type EgressProxy } from './egress-proxy.js';
import { cidrContains, formatCidr, parseCidr, specialRange, type Cidr, type IpAddr } from './ip.js';

export { parseEgressProxy, proxyHostPort, type EgressProxy } from './egress-proxy.js';

/**
 * What a VM's guest may reach (docs/network.md). `default` decides what no rule names; `deny`
 * rules win over `allow` rules. A rule is one of:
 * - a domain, `pypi.org` (that name only) or `*.github.com` (any name under it, not the name
 *   itself), optionally with `:PORT`;
 * - an IP address or CIDR block, IPv4 or IPv6 (`10.1.0.0/16`, `2001:db8::/32`), optionally with
 *   `:PORT` (IPv6 with a port in brackets: `[2001:db8::1]:443`);
 * - `host:PORT`, a port on the host's loopback, which the guest reaches as `host.svc.internal:PORT`.
 */
export interface EgressPolicy {
  default: 'allow' | 'deny';
  allow: string[];
  deny: string[];
  /** A SOCKS5 proxy the VM's allowed outbound TCP is tunneled through (docs/network.md). */
  proxy?: EgressProxy;
}

export type EgressRule =
  | { kind: 'host'; port: number; text: string }
  | { kind: 'domain'; name: string; wildcard: boolean; port?: number; text: string }
  | { kind: 'cidr'; cidr: Cidr; port?: number; text: string };

/** The name a guest resolves to reach the host's loopback ports (`host:PORT` rules). */
export const HOST_NAME = 'host.svc.internal';
/** Rules per list; generous on purpose (peers cap at a handful and their users complain). */
export const MAX_RULES = 1000;
/** Internet allowed; the host, private and link-local ranges denied (they are always, unless named). */
export const DEFAULT_EGRESS: EgressPolicy = Object.freeze({ default: 'allow', allow: [], deny: [] }) as EgressPolicy;

function port(text: string, rule: string): number {
  if (!/^\d{1,5}$/.test(text) || Number(text) < 1 || Number(text) > 65535)
    throw new InvalidArgumentError(`egress rule ${JSON.stringify(rule)}: port must be 1-65535`);
  return Number(text);
}

function domain(text: string, rule: string): { name: string; wildcard: boolean } {
  let name = text.toLowerCase();
  if (name.endsWith('.')) name = name.slice(0, -1);
  const wildcard = name.startsWith('*.');
  if (wildcard) name = name.slice(2);
  if (!isHostName(name)) {
    throw new InvalidArgumentError(`egress rule ${JSON.stringify(rule)} is not a domain, an IP or CIDR, or host:PORT`);
  }
  return { name, wildcard };
}

/** Parses one rule. InvalidArgumentError naming the rule when it is none of the forms. */
export function parseEgressRule(raw: unknown): EgressRule {
  if (typeof raw !== 'string' || raw.length === 0 || raw.length > 300)
    throw new InvalidArgumentError(
      `egress rule must be a non-empty string of at most 300 characters, got ${JSON.stringify(raw)?.slice(0, 80)}`,
    );
  const text = raw.trim();
  const hostPort = /^host:(.*)$/i.exec(text);
  if (hostPort) return { kind: 'host', port: port(hostPort[1], raw), text: `host:${port(hostPort[1], raw)}` };
  // [v6]:port, [v6/n]:port
  const bracket = /^\[([^\]]+)\](?::(.*))?$/.exec(text);
  if (bracket) {
    const cidr = parseCidr(bracket[1]);
    if (!cidr)
      throw new InvalidArgumentError(`egress rule ${JSON.stringify(raw)}: ${bracket[1]} is not an IP address or CIDR`);
    const p = bracket[2] === undefined ? undefined : port(bracket[2], raw);
    return cidrRule(cidr, p);
  }
  // A bare IPv6 address or block has two colons or more; it takes no port (use brackets).
  if ((text.match(/:/g) ?? []).length >= 2) {
    const cidr = parseCidr(text);
    if (!cidr)
      throw new InvalidArgumentError(
        `egress rule ${JSON.stringify(raw)} is not an IP address or CIDR (an IPv6 rule with a port is written [ADDR]:PORT)`,
      );
    return cidrRule(cidr, undefined);
  }
  const colon = text.lastIndexOf(':');
  const head = colon < 0 ? text : text.slice(0, colon);
  const p = colon < 0 ? undefined : port(text.slice(colon + 1), raw);
  if (/^[\d./]+$/.test(head)) {
    const cidr = parseCidr(head);
    if (!cidr)
      throw new InvalidArgumentError(`egress rule ${JSON.stringify(raw)}: ${head} is not an IP address or CIDR`);
    return cidrRule(cidr, p);
  }
  const d = domain(head, raw);
  if (d.name === HOST_NAME)
    throw new InvalidArgumentError(`egress rule ${JSON.stringify(raw)}: name the host's ports as host:PORT`);
  return { kind: 'domain', ...d, port: p, text: `${d.wildcard ? '*.' : ''}${d.name}${p ? `:${p}` : ''}` };
}

function cidrRule(cidr: Cidr, p: number | undefined): EgressRule {
  const addr = formatCidr(cidr);
  const shown = p === undefined ? addr : cidr.family === 6 ? `[${addr}]:${p}` : `${addr}:${p}`;
  return { kind: 'cidr', cidr, port: p, text: shown };
}

/**
 * Validates a policy as a create request, a PUT or the config gives it: unknown fields, the
 * default and every rule. Rules come back in their normal form (lower case, blocks cleared of host
 * bits, duplicates dropped), so a policy reads back as the daemon understood it.
 */
export function parseEgressPolicy(v: unknown, where = 'egress'): EgressPolicy {
  if (!isObject(v)) throw new InvalidArgumentError(`${where} must be an object {default, allow, deny}`);
  for (const k of Object.keys(v)) {
    if (!['default', 'allow', 'deny', 'proxy'].includes(k))
      throw new InvalidArgumentError(`${where}: unknown field "${k}"`);
  }
  const def = v.default ?? 'allow';
  if (def !== 'allow' && def !== 'deny') throw new InvalidArgumentError(`${where}.default must be "allow" or "deny"`);
  const list = (key: 'allow' | 'deny'): string[] => {
    const raw = v[key] ?? [];
    if (!Array.isArray(raw)) throw new InvalidArgumentError(`${where}.${key} must be an array of rules`);
    if (raw.length > MAX_RULES) throw new InvalidArgumentError(`${where}.${key}: at most ${MAX_RULES} rules`);
    const seen = new Set<string>();
    for (const r of raw) {
      try {
        seen.add(parseEgressRule(r).text);
      } catch (err) {
        throw new InvalidArgumentError(`${where}.${key}: ${(err as Error).message}`);
      }
    }
    return [...seen];
  };
  const proxy = v.proxy === undefined || v.proxy === null ? undefined : parseEgressProxy(v.proxy, `${where}.proxy`);
  return { default: def, allow: list('allow'), deny: list('deny'), ...(proxy ? { proxy } : {}) };
}

/** How a rule (or the lack of one) decided: `rule` is the rule's text, or a word for an implicit one. */
export interface EgressDecision {
  allow: boolean;
  rule: string;
  /** The connection was let through by a domain rule: a TLS SNI or HTTP Host it shows must match one. */
  byName?: boolean;
}

/** What is known of a connection the guest opens. */
export interface Destination {
  ip: IpAddr;
  port: number;
  proto: 'tcp' | 'udp';
  /** Names the network's resolver answered with this address (the guest asked for them). */
  names: readonly string[];
}

function nameMatches(r: Extract<EgressRule, { kind: 'domain' }>, name: string): boolean {
  return r.wildcard ? name.endsWith(`.${r.name}`) : name === r.name;
}

const portOk = (r: { port?: number }, p: number | undefined) => r.port === undefined || p === undefined || r.port === p;

/** Normalizes a name as the guest asked for it or sent it (case, a trailing dot). */
export function normalName(name: string): string {
  const n = name.toLowerCase();
  return n.endsWith('.') ? n.slice(0, -1) : n;
}

/**
 * A policy made ready to decide: the rules parsed once. Every method is pure; what the network
 * learned (which names resolved to an address, which addresses are the host's) comes in arguments.
 */
export class EgressRules {
  readonly allow: EgressRule[];
  readonly deny: EgressRule[];

  constructor(readonly policy: EgressPolicy) {
    this.allow = policy.allow.map(parseEgressRule);
    this.deny = policy.deny.map(parseEgressRule);
  }

  private static domainRule(rules: EgressRule[], name: string, p?: number, portless = false) {
    return rules.find(
      (r): r is Extract<EgressRule, { kind: 'domain' }> =>
        r.kind === 'domain' && nameMatches(r, name) && (portless ? r.port === undefined : portOk(r, p)),
    );
  }

  /**
   * May the guest resolve `name`? The host's own name always; a name a port-less deny rule names
   * never; a name an allow rule names (with any port) yes; else the default.
   */
  resolve(rawName: string): EgressDecision {
    const name = normalName(rawName);
    if (name === HOST_NAME) return { allow: true, rule: HOST_NAME };
    const denied = EgressRules.domainRule(this.deny, name, undefined, true);
    if (denied) return { allow: false, rule: denied.text };
    const allowed = EgressRules.domainRule(this.allow, name);
    if (allowed) return { allow: true, rule: allowed.text };
    return { allow: this.policy.default === 'allow', rule: 'default' };
  }

  /** A port on the host's loopback (the guest asked for host.svc.internal:PORT): only when a rule names it. */
  hostPort(p: number): EgressDecision {
    const denied = this.deny.find((r) => r.kind === 'host' && r.port === p);
    if (denied) return { allow: false, rule: denied.text };
    const allowed = this.allow.find((r) => r.kind === 'host' && r.port === p);
    return allowed ? { allow: true, rule: allowed.text } : { allow: false, rule: 'host-closed' };
  }

  /**
   * A connection (TCP) or flow (UDP) to an address beyond the guest's network. In order: deny
   * rules (by block, or by a name the address was resolved from); the ranges nothing opens (the
   * host's loopback, reached through `host:PORT` only; multicast; reserved); allow rules by block;
   * DNS to anything but the network's own resolver; the private and link-local ranges and the
   * host's own addresses, which only a block rule opens (a name never does: a DNS answer does not
   * get to point a guest inside); allow rules by name, for TCP only (a TLS SNI or HTTP Host it
   * shows must then match an allowed name too); then the default.
   */
  connect(d: Destination, hostAddress: (ip: IpAddr) => boolean): EgressDecision {
    const names = d.names.map(normalName);
    for (const r of this.deny) {
      if (r.kind === 'cidr' && cidrContains(r.cidr, d.ip) && portOk(r, d.port)) return { allow: false, rule: r.text };
      if (r.kind === 'domain' && portOk(r, d.port) && names.some((n) => nameMatches(r, n)))
        return { allow: false, rule: r.text };
    }
    const special = specialRange(d.ip);
    if (special?.never) return { allow: false, rule: special.why };
    const byBlock = this.allow.find((r) => r.kind === 'cidr' && cidrContains(r.cidr, d.ip) && portOk(r, d.port));
    if (byBlock) return { allow: true, rule: byBlock.text };
    if (d.port === 53 || d.port === 853) return { allow: false, rule: 'dns-elsewhere' };
    if (special) return { allow: false, rule: special.why };
    if (hostAddress(d.ip)) return { allow: false, rule: 'host-address' };
    if (d.proto === 'tcp') {
      for (const n of names) {
        const r = EgressRules.domainRule(this.allow, n, d.port);
        if (r) return { allow: true, rule: r.text, byName: true };
      }
    }
    return { allow: this.policy.default === 'allow', rule: 'default' };
  }

  /**
   * The name a connection showed (TLS SNI, HTTP Host) once the address let it through: a deny rule
   * that names it closes it, and one let through by a domain rule must show an allowed name.
   */
  shown(rawName: string, p: number, earlier: EgressDecision): EgressDecision {
    const name = normalName(rawName);
    const denied = EgressRules.domainRule(this.deny, name, p);
    if (denied) return { allow: false, rule: denied.text };
    if (!earlier.byName) return earlier;
    const allowed = EgressRules.domainRule(this.allow, name, p);
    return allowed ? { allow: true, rule: allowed.text, byName: true } : { allow: false, rule: 'name-mismatch' };
  }

  /** Names the deny rules give without a wildcard: resolved ahead, so their addresses do not connect either. */
  deniedNames(): string[] {
    return this.deny.flatMap((r) => (r.kind === 'domain' && !r.wildcard ? [r.name] : []));
  }
}

/** One entry of a VM's egress log (GET /vms/{name}/egress/log). */
export interface EgressEvent {
  /** RFC 3339 time. */
  t: string;
  vm: string;
  /**
   * `dns`: a name asked for; `open`: a connection (or UDP flow) let through; `deny`: one refused;
   * `close`: a let-through one ended (with its byte counts; `rule` says which policy ended it early);
   * `secret`: an egress secret put into a request to a host it is for (`secret` names it, never its value).
   */
  event: 'dns' | 'open' | 'deny' | 'close' | 'secret';
  proto: 'tcp' | 'udp' | 'icmp' | 'dns';
  decision: 'allow' | 'deny';
  /** The rule that decided (its text), or a word for an implicit one (`default`, `private`, `host-closed`, ...). */
  rule: string;
  /** The name: the one asked for (dns), or the one the address was resolved from or the connection showed. */
  name?: string;
  addr?: string;
  port?: number;
  /** What a resolved name answered (dns, at most 8). */
  answers?: string[];
  bytes_out?: number;
  bytes_in?: number;
  duration_ms?: number;
  /** Repeats of the same refusal folded into this one (a flood is logged once a second). */
  repeats?: number;
  error?: string;
  /** The egress secret a `secret` entry (or a `deny` of a request that carried its placeholder) is about: its name. */
  secret?: string;
}
