import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { BrowserSessions } from './sessions.js';

/**
 * Bearer-token check. Both sides are hashed first so the compare is constant-time whatever the
 * lengths. An empty configured token means no authentication. A live dashboard session
 * (sessions.ts: its header, or its WebSocket subprotocol) stands for the token.
 */
export class BearerAuth {
  private readonly expected: Buffer | undefined;

  constructor(
    token: string,
    readonly sessions?: BrowserSessions,
  ) {
    this.expected = token ? digest(token) : undefined;
  }

  /** Is `token` the configured token? (The dashboard's log-in.) */
  matches(token: string): boolean {
    return this.expected !== undefined && timingSafeEqual(digest(token), this.expected);
  }

  get enabled(): boolean {
    return this.expected !== undefined;
  }

  check(req: IncomingMessage): boolean {
    if (!this.expected) return true;
    const header = req.headers.authorization ?? '';
    const m = /^Bearer\s+(.+)$/i.exec(header);
    if (!m) return this.sessions?.valid(req) ?? false;
    return this.matches(m[1].trim());
  }
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/** Are two secrets the same? Hashed first, as BearerAuth does, so the compare is constant-time whatever the lengths. */
export function sameSecret(a: string, b: string): boolean {
  return timingSafeEqual(digest(a), digest(b));
}

export const AUTH_CHALLENGE = 'Bearer realm="svc"';
