import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { HOST_NAME, normalName, type EgressDecision } from '../../domain/egress.js';
import { duplexPair } from './duplex-pair.js';
import type { EgressGuard } from './egress-guard.js';
import type { EgressSecrets } from './secret-proxy.js';
import { sniff, type Sniffed } from './sniff.js';
import type { TcpFlow } from './tcp-flow.js';

/** A guest connection's first bytes are held at most this long for a TLS SNI or HTTP Host. */
const SNIFF_MAX = 16 << 10;

/** A guest TCP connection and what decided it. */
export interface Conn {
  flow: TcpFlow;
  /** `out`: to an address beyond the network; `host`: to a host loopback port; `local`: the resolver; `in`: a forward. */
  kind: 'out' | 'host' | 'local' | 'in';
  addr: string;
  port: number;
  decision: EgressDecision;
  names: string[];
  /** The name its TLS SNI or HTTP Host showed. */
  shown?: string;
  /** The policy ended it (its rule). */
  endedBy?: string;
  /** The host socket, until an egress secret's interception takes it over. */
  sock?: Socket;
  /** Where the host socket went. */
  to?: { host: string; port: number };
  /** The socket to a SOCKS proxy while it is being asked to connect (destroyed if the flow ends first). */
  dialing?: Socket;
  /** Another connection to `to` through the same proxy (an egress secret's interception opens more). */
  reopen?: () => Duplex;
  error?: string;
}

/**
 * What a held connection shows (TLS SNI, HTTP Host), checked once enough of it came: a name the
 * policy denies ends it; with egress secrets it is handed to their injection or read for their
 * placeholders. Then its bytes go on.
 */
export function checkShown(c: Conn, guard: EgressGuard, secrets: EgressSecrets | undefined): void {
  const held = c.flow.heldBytes();
  const s = sniff(held);
  if (s.kind === 'more' && held.length < SNIFF_MAX) return;
  c.flow.onHeld = undefined;
  if ((s.kind === 'tls' || s.kind === 'http') && s.name) {
    c.shown = s.name;
    const d = guard.shown(s.name, c.port, c.decision);
    if (!d.allow) {
      guard.fold({
        event: 'deny',
        proto: 'tcp',
        addr: c.addr,
        port: c.port,
        name: s.name,
        decision: 'deny',
        rule: d.rule,
      });
      c.endedBy = d.rule;
      c.flow.abort();
      return;
    }
    c.decision = d;
  }
  if (secrets?.bindings.length) secretsFor(c, s, guard, secrets);
  c.flow.release();
}

/**
 * A connection of a VM with egress secrets: to a host a secret is for (by TLS SNI, whose
 * upstream certificate must then prove it; or by HTTP Host, which must name what the address was
 * resolved from) it is handed to the injection; any other is read for placeholders on its way.
 */
function secretsFor(c: Conn, s: Sniffed, guard: EgressGuard, secrets: EgressSecrets): void {
  const name = (s.kind === 'tls' || s.kind === 'http') && s.name ? normalName(s.name) : undefined;
  const resolvedAs = name !== undefined && (c.kind === 'host' ? name === HOST_NAME : c.names.includes(name));
  const intercept = name !== undefined && secrets.isFor(name) && c.sock && c.to && (s.kind === 'tls' || resolvedAs);
  if (!intercept) {
    const scan = secrets.scanner();
    c.flow.inspect = (b) => {
      const secret = scan.scan(b);
      if (secret === undefined) return true;
      c.endedBy = 'egress-secret';
      guard.fold({
        event: 'deny',
        proto: 'tcp',
        addr: c.addr,
        port: c.port,
        name: name ?? c.names[0],
        decision: 'deny',
        rule: 'egress-secret',
        secret,
        error: 'its placeholder on a connection to a host it is not for',
      });
      return false;
    };
    return;
  }
  const [guestEnd, proxyEnd] = duplexPair();
  c.flow.rebind(guestEnd);
  const upstream = c.sock!;
  c.sock = undefined;
  secrets.intercept({
    guest: proxyEnd,
    upstream,
    tls: s.kind === 'tls',
    name: name!,
    alpn: s.kind === 'tls' ? s.alpn : undefined,
    addr: c.addr,
    to: c.to!,
    reopen: c.reopen,
  });
}
