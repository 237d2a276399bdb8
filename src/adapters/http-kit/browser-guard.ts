import type { IncomingMessage, RequestListener } from 'node:http';
import { isIP } from 'node:net';
import type { Duplex } from 'node:stream';
import { PermissionDeniedError } from '../../domain/errors.js';
import { writeHttpError } from './error-status.js';
import { rejectUpgrade } from './terminal-socket.js';

/** What the TCP listener accepts from browsers: its own names, and origins allowed to change things. */
export interface BrowserGuardOptions {
  /** The bind host (`127.0.0.1`, `::1`, a name); wildcard binds add nothing. */
  bindHost: string;
  /** Extra host names the daemon answers to (config `allowed_hosts`). */
  allowedHosts: readonly string[];
  /** Origins other than the daemon's own that may change things (config `allowed_origins`). */
  allowedOrigins: readonly string[];
  /** Also accept any IP literal as Host (the guest agent, reached by address, never by name). */
  anyIpHost?: boolean;
}

export type Refusal = (req: IncomingMessage) => string | undefined;

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '::1'];

/** `host[:port]` or `[v6][:port]` -> lowercase host without brackets; undefined when malformed. */
export function hostName(value: string): string | undefined {
  const m = /^(?:\[([0-9a-f:.]+)\]|([^:[\]\s/@]+))(?::\d{1,5})?$/i.exec(value.trim());
  return m ? (m[1] ?? m[2]).toLowerCase().replace(/\.$/, '') : undefined;
}

/** `http://host:port` with the scheme's default port dropped, lowercase; undefined for anything else. */
function normalOrigin(value: string): string | undefined {
  try {
    const u = new URL(value);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') return undefined;
    return u.origin.toLowerCase();
  } catch {
    return undefined;
  }
}

/**
 * The browser-facing checks of the TCP listener (docs/security.md). A web page the user visits can
 * send requests to 127.0.0.1 (plain no-CORS fetches, forms, WebSocket upgrades, which CORS does not
 * cover) and, through DNS rebinding, under a host name of its own. So:
 * - the `Host` must be one of the daemon's own names, which defeats rebinding;
 * - a request that changes something, and every WebSocket upgrade, that carries an `Origin` must come
 *   from the daemon's own origin (the dashboard) or an allowed one; browsers always send `Origin` on
 *   those, while curl, the CLI and SDKs send none and are not affected.
 * Returns why a request is refused, or undefined to let it through.
 */
export function browserGuard(o: BrowserGuardOptions): Refusal {
  const wildcard = ['0.0.0.0', '::', ''].includes(o.bindHost);
  const hosts = new Set(
    [...LOOPBACK_NAMES, ...(wildcard ? [] : [o.bindHost]), ...o.allowedHosts].map(
      (h) => hostName(h) ?? h.toLowerCase(),
    ),
  );
  const origins = new Set(o.allowedOrigins.map((x) => normalOrigin(x) ?? x));
  return (req) => {
    const host = req.headers.host;
    if (host !== undefined) {
      const name = hostName(host);
      if (name === undefined || !(hosts.has(name) || (o.anyIpHost && isIP(name) !== 0))) {
        return `Host ${JSON.stringify(host.slice(0, 100))} is not a name of this daemon; add it to allowed_hosts to serve it`;
      }
    }
    const upgrade = (req.headers.upgrade ?? '') !== '';
    if (!upgrade && SAFE_METHODS.has(req.method ?? 'GET')) return undefined;
    const origin = req.headers.origin;
    const site = req.headers['sec-fetch-site'];
    if (origin === undefined) {
      // Browsers that omit Origin still say where a request comes from.
      return site === 'cross-site' || site === 'same-site'
        ? `a ${site} browser request may not change anything here`
        : undefined;
    }
    const own = host !== undefined ? normalOrigin(`http://${host}`) : undefined;
    const given = normalOrigin(origin);
    if (given !== undefined && (origins.has(given) || (own !== undefined && given.replace(/^https:/, 'http:') === own)))
      return undefined;
    return `Origin ${JSON.stringify(origin.slice(0, 100))} may not ${upgrade ? 'open a WebSocket' : 'change anything'} here; add it to allowed_origins to allow it`;
  };
}

/** The request listener behind a guard: a refused request gets 403 `{error, code}` and goes no further. */
export function guardRequests(app: RequestListener, refuse: Refusal): RequestListener {
  return (req, res) => {
    const why = refuse(req);
    if (why === undefined) return app(req, res);
    writeHttpError(res, new PermissionDeniedError(why), true);
  };
}

export type UpgradeHandler = (req: IncomingMessage, socket: Duplex, head: Buffer) => void;

/** The same for WebSocket upgrades, which browsers send cross-origin without any CORS check. */
export function guardUpgrades(upgrade: UpgradeHandler, refuse: Refusal): UpgradeHandler {
  return (req, socket, head) => {
    const why = refuse(req);
    if (why === undefined) return upgrade(req, socket, head);
    rejectUpgrade(socket, new PermissionDeniedError(why));
  };
}
