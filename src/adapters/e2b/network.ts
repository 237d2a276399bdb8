import { parseEgressProxy, type EgressPolicy, type EgressProxy } from '../../domain/egress.js';
import { InvalidArgumentError, NotSupportedError } from '../../domain/errors.js';
import { cidrContains, parseCidr } from '../../domain/ip.js';

/** E2B's `network` of a create (and the body of its update), the part svc translates. */
export interface E2bNetwork {
  allowOut?: unknown;
  denyOut?: unknown;
  rules?: unknown;
  egressProxy?: unknown;
}

/** E2B's "all traffic": a deny of it is a deny by default. */
const ALL_TRAFFIC = new Set(['0.0.0.0/0', '::/0']);

function list(v: unknown, what: string): string[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || v.some((x) => typeof x !== 'string' || x === ''))
    throw new InvalidArgumentError(`network.${what} must be a list of non-empty strings`);
  return v as string[];
}

/**
 * svc's egress policy for E2B's network options (docs/e2b.md). E2B lets an allowed destination win
 * over a denied one, and allows everything unless told; svc decides deny rules first. So a deny of
 * all traffic (or `allowInternetAccess: false`) is svc's `default: deny` with the allowed
 * destinations as its allow rules, and otherwise the denied blocks are deny rules. An allowed
 * address inside a denied block (which E2B would let through and svc would not) is refused rather
 * than decided differently. Header rules and the SOCKS proxy's password are not policy
 * (rule-secrets.ts, `proxyFromE2b`). Undefined when nothing is asked (the daemon's default policy applies).
 */
export function egressFromE2b(
  network: E2bNetwork | undefined,
  allowInternetAccess?: unknown,
): EgressPolicy | undefined {
  if (allowInternetAccess !== undefined && typeof allowInternetAccess !== 'boolean')
    throw new InvalidArgumentError('allow_internet_access must be true or false');
  if (network !== undefined && (typeof network !== 'object' || network === null || Array.isArray(network)))
    throw new InvalidArgumentError('network must be an object');
  const n = network ?? {};
  const allowOut = list(n.allowOut, 'allowOut');
  const denyOut = list(n.denyOut, 'denyOut');
  for (const d of denyOut)
    if (!parseCidr(d))
      throw new InvalidArgumentError(
        `network.denyOut ${JSON.stringify(d)}: a CIDR block or an IP address (E2B takes no names here)`,
      );
  const denyAll = allowInternetAccess === false || denyOut.some((d) => ALL_TRAFFIC.has(d));
  if (allowInternetAccess === undefined && network === undefined) return undefined;
  if (denyAll) return { default: 'deny', allow: allowOut, deny: [] };
  for (const a of allowOut) {
    const c = parseCidr(a); // a name is decided by the addresses it resolves to: nothing to compare ahead
    const inside = c && denyOut.find((d) => cidrContains(parseCidr(d)!, { family: c.family, value: c.base }));
    if (inside)
      throw new NotSupportedError(
        `network.allowOut ${a} is inside network.denyOut ${inside}: svc decides deny rules first, so it would be denied; leave it out of denyOut`,
      );
  }
  return { default: 'allow', allow: allowOut, deny: denyOut };
}

/** E2B's `network.egressProxy`: svc's proxy (its secret still to be made) and the password to keep in it. */
export function proxyFromE2b(v: unknown): { proxy: EgressProxy; password?: string } | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'object' || Array.isArray(v))
    throw new InvalidArgumentError('network.egressProxy must be an object {address, username?, password?}');
  const { password, ...rest } = v as Record<string, unknown>;
  // svc's own field names a host secret: an E2B caller gives a password, never another secret's name.
  if ('secret' in rest) throw new InvalidArgumentError('network.egressProxy: unknown field "secret"');
  const proxy = parseEgressProxy(rest, 'network.egressProxy');
  if (password === undefined || password === null) return { proxy };
  if (proxy.username === undefined)
    throw new InvalidArgumentError('network.egressProxy.password is only valid together with username');
  if (typeof password !== 'string' || Buffer.byteLength(password) > 255)
    throw new InvalidArgumentError('network.egressProxy.password must be text of at most 255 bytes');
  return { proxy, password };
}

/** E2B's view of a VM's policy: what `getInfo` answers (`allowInternetAccess`, `network`). */
export function e2bNetworkOf(
  egress: EgressPolicy,
  privateTraffic = false,
  rules: Record<string, unknown[]> = {},
): {
  allowInternetAccess: boolean;
  network: {
    allowOut: string[];
    denyOut: string[];
    allowPublicTraffic: boolean;
    rules?: Record<string, unknown[]>;
    egressProxy?: { address: string; username?: string };
  };
} {
  const allowPublicTraffic = !privateTraffic;
  const p = egress.proxy;
  // The password is never answered (E2B's API does not either).
  const withRules = {
    ...(Object.keys(rules).length ? { rules } : {}),
    ...(p
      ? { egressProxy: { address: p.address, ...(p.username !== undefined ? { username: p.username } : {}) } }
      : {}),
  };
  return egress.default === 'deny'
    ? {
        allowInternetAccess: false,
        network: { allowOut: [...egress.allow], denyOut: ['0.0.0.0/0'], allowPublicTraffic, ...withRules },
      }
    : {
        allowInternetAccess: true,
        network: { allowOut: [...egress.allow], denyOut: [...egress.deny], allowPublicTraffic, ...withRules },
      };
}

/** E2B's `network.allowPublicTraffic` of a create: whether its ports' URLs are open without a token. */
export function publicTraffic(network: unknown): boolean {
  const v = (network as { allowPublicTraffic?: unknown } | undefined)?.allowPublicTraffic;
  if (v !== undefined && typeof v !== 'boolean')
    throw new InvalidArgumentError('network.allowPublicTraffic must be true or false');
  return v !== false;
}
