import { createHash, randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

export const SESSION_COOKIE = 'svc_session';

/**
 * The dashboard's browser sessions (docs/dashboard.md): a browser that showed the token once gets
 * a random session id in an `HttpOnly; SameSite=Strict` cookie that expires after `ttlMs`. Only
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

  /** A new session; the id goes only into the cookie. */
  open(): string {
    this.sweep();
    while (this.live.size >= this.max) this.live.delete(this.live.keys().next().value as string);
    const id = randomBytes(32).toString('base64url');
    this.live.set(digest(id), this.now() + this.ttlMs);
    return id;
  }

  /** Is the request's session cookie a live session? */
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

  /** `Set-Cookie` for a new session (secure when the page came over TLS through a proxy). */
  cookie(id: string, secure: boolean): string {
    return `${SESSION_COOKIE}=${id}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${Math.floor(this.ttlMs / 1000)}${secure ? '; Secure' : ''}`;
  }

  /** `Set-Cookie` that makes the browser forget its session. */
  static clearCookie(): string {
    return `${SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0`;
  }

  private sweep(): void {
    const t = this.now();
    for (const [k, exp] of this.live) if (exp <= t) this.live.delete(k);
  }
}

/** The session id in the request's cookies, if any (a well-formed one only). */
export function sessionId(req: IncomingMessage): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0 || part.slice(0, eq).trim() !== SESSION_COOKIE) continue;
    const v = part.slice(eq + 1).trim();
    if (/^[A-Za-z0-9_-]{43}$/.test(v)) return v;
  }
  return undefined;
}

function digest(s: string): string {
  return createHash('sha256').update(s).digest('hex');
}
