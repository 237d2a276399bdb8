import { createHash, randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/** The header the dashboard sends its session in. */
export const SESSION_HEADER = 'x-svc-session';
/** A WebSocket cannot carry headers from a page: the session rides as a subprotocol `svc-session.ID` beside `svc`. */
export const SESSION_PROTOCOL_PREFIX = 'svc-session.';
export const DASHBOARD_PROTOCOL = 'svc';

/**
 * The dashboard's browser sessions (docs/dashboard.md, docs/security.md): a browser that showed
 * the token once gets a random session id that the page keeps in its origin's storage and sends
 * in the `X-Svc-Session` header (and as a WebSocket subprotocol). Not a cookie: cookies are not
 * isolated by port (RFC 6265 section 8.5), so a guest's app forwarded to another loopback port
 * would receive one; an origin's storage is isolated by port. Sessions expire after `ttlMs`. Only
 * hashes of ids are kept, in memory: a daemon restart logs every browser out. At most `max`
 * sessions live; opening one more drops the oldest.
 */
export class BrowserSessions {
  /** sha256(id) -> expiry (ms since epoch), oldest first. */
  private readonly live = new Map<string, number>();

  constructor(
    readonly ttlMs: number,
    private readonly now: () => number = Date.now,
    private readonly max = 64,
  ) {}

  /** A new session; its id is answered once, to the page that logged in. */
  open(): string {
    this.sweep();
    while (this.live.size >= this.max) this.live.delete(this.live.keys().next().value as string);
    const id = randomBytes(32).toString('base64url');
    this.live.set(digest(id), this.now() + this.ttlMs);
    return id;
  }

  /** Does the request carry a live session (header, or subprotocol on an upgrade)? */
  valid(req: IncomingMessage): boolean {
    const id = sessionId(req);
    if (id === undefined) return false;
    const expiry = this.live.get(digest(id));
    if (expiry === undefined) return false;
    if (expiry <= this.now()) {
      this.live.delete(digest(id));
      return false;
    }
    return true;
  }

  /** Ends the request's session, if it has one. */
  close(req: IncomingMessage): void {
    const id = sessionId(req);
    if (id !== undefined) this.live.delete(digest(id));
  }

  private sweep(): void {
    const t = this.now();
    for (const [k, exp] of this.live) if (exp <= t) this.live.delete(k);
  }
}

const SESSION_ID = /^[A-Za-z0-9_-]{43}$/;

/** The session id the request carries, if any (a well-formed one only): its header, else its WebSocket subprotocol. */
export function sessionId(req: IncomingMessage): string | undefined {
  const header = req.headers[SESSION_HEADER];
  if (typeof header === 'string') return SESSION_ID.test(header.trim()) ? header.trim() : undefined;
  for (const p of String(req.headers['sec-websocket-protocol'] ?? '').split(',')) {
    const v = p.trim();
    if (v.startsWith(SESSION_PROTOCOL_PREFIX) && SESSION_ID.test(v.slice(SESSION_PROTOCOL_PREFIX.length)))
      return v.slice(SESSION_PROTOCOL_PREFIX.length);
  }
  return undefined;
}

/**
 * The subprotocol a WebSocket server answers (ws's `handleProtocols`): the dashboard's `svc`
 * when it was asked for (a browser fails a handshake that asked for protocols and got none);
 * never the session's.
 */
export function dashboardProtocol(protocols: Set<string>): string | false {
  return protocols.has(DASHBOARD_PROTOCOL) ? DASHBOARD_PROTOCOL : false;
}

function digest(s: string): string {
  return createHash('sha256').update(s).digest('hex');
}
