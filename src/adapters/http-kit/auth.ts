import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { ResourceExhaustedError } from '../../domain/errors.js';
import { sessionId, type BrowserSessions } from './sessions.js';

/**
 * Bearer-token check. Both sides are hashed first so the compare is constant-time whatever the
 * lengths. An empty configured token means no authentication. A live dashboard session
 * (sessions.ts: its header, or its WebSocket subprotocol) stands for the token.
 */
export class BearerAuth {
  /**
   * Digests of the tokens that open every route: the API token and the cluster's (docs/cluster.md:
   * what nodes present to each other). None: no authentication.
   */
  private readonly accepted: Buffer[];
  /** The cluster's token's digest, when there is one: what only nodes present. */
  private readonly peer?: Buffer;

  constructor(
    token: string,
    readonly sessions?: BrowserSessions,
    readonly throttle: AuthThrottle = new AuthThrottle(),
    peerToken = '',
  ) {
    this.accepted = [token, peerToken].filter(Boolean).map(digest);
    if (peerToken) this.peer = digest(peerToken);
  }

  /** Does the request carry the cluster's token (a node calling, not a user)? Never without one configured. */
  isPeer(req: IncomingMessage): boolean {
    const token = bearer(req);
    return this.peer !== undefined && token !== undefined && timingSafeEqual(digest(token), this.peer);
  }

  /**
   * `check`, paced by the throttle for requests over TCP that present credentials (a bearer token
   * or a session): after many wrong ones they are checked a few per second, and a wrong one counts.
   * The Unix socket (only its owner reaches it) and requests without credentials are not paced.
   * ResourceExhaustedError (429) when too many wait.
   */
  async verify(req: IncomingMessage): Promise<boolean> {
    if (!this.enabled) return true;
    if (req.headers.authorization === undefined && sessionId(req) === undefined) return false;
    return this.throttle.paced(req, () => this.check(req));
  }

  /** `matches`, paced like `verify` (the dashboard's log-in). */
  matchesSlowly(req: IncomingMessage, token: string): Promise<boolean> {
    return this.throttle.paced(req, () => this.matches(token));
  }

  /** Is `token` one of the configured tokens? (The dashboard's log-in.) Each is compared, whichever matches. */
  matches(token: string): boolean {
    const d = digest(token);
    return this.accepted.map((a) => timingSafeEqual(d, a)).includes(true);
  }

  get enabled(): boolean {
    return this.accepted.length > 0;
  }

  check(req: IncomingMessage): boolean {
    if (!this.enabled) return true;
    const token = bearer(req);
    if (token === undefined) return this.sessions?.valid(req) ?? false;
    return this.matches(token);
  }
}

/** How wrong credentials slow the next ones down (AuthThrottle). */
export interface ThrottleRule {
  /** Wrong credentials within `windowMs` that cost nothing. */
  free: number;
  windowMs: number;
  /** Past `free`, credentials are checked at most this many times a second... */
  perSecond: number;
  /** ...and at most this many wait; more are answered 429 at once, unchecked. */
  maxWaiting: number;
}

export const THROTTLE: ThrottleRule = { free: 10, windowMs: 60_000, perSecond: 4, maxWaiting: 64 };

/**
 * Guessing the token over TCP is slowed down: after `free` wrong credentials within `windowMs`
 * (all clients together: on loopback they share one address), every TCP request that presents
 * credentials waits its turn, `perSecond` a second, before they are checked, and a request that
 * finds `maxWaiting` ahead of it is answered 429 unchecked. A right token is paced the same way
 * while it lasts, so timing tells nothing, and it never locks anyone out: the Unix socket is not
 * paced, and the pace ends a window after the last wrong guess.
 */
export class AuthThrottle {
  private readonly failures: number[] = [];
  private waiting = 0;
  private nextSlot = 0;

  constructor(
    private readonly rule: ThrottleRule = THROTTLE,
    private readonly now: () => number = Date.now,
  ) {}

  /** Wrong credentials within the window. */
  recentFailures(): number {
    const since = this.now() - this.rule.windowMs;
    while (this.failures.length && this.failures[0] <= since) this.failures.shift();
    return this.failures.length;
  }

  /** Runs `check` in its turn (unpaced from the Unix socket); a false answer over TCP counts as a failure. */
  async paced(req: IncomingMessage, check: () => boolean): Promise<boolean> {
    // A Unix socket peer has no address; only TCP is paced.
    if (req.socket?.remoteAddress === undefined) return check();
    if (this.recentFailures() > this.rule.free) {
      if (this.waiting >= this.rule.maxWaiting)
        throw new ResourceExhaustedError(
          'too many wrong tokens lately: credentials are checked slowly for a while; try again shortly',
          Math.ceil(this.rule.windowMs / 1000 / 6),
        );
      const t = this.now();
      const slot = Math.max(t, this.nextSlot);
      this.nextSlot = slot + 1000 / this.rule.perSecond;
      this.waiting++;
      try {
        await new Promise((r) => setTimeout(r, slot - t));
      } finally {
        this.waiting--;
      }
    }
    const ok = check();
    if (!ok) {
      this.failures.push(this.now());
      // Bounded: only the count within the window matters, and past free + maxWaiting it changes nothing.
      if (this.failures.length > 4 * (this.rule.free + this.rule.maxWaiting)) this.failures.shift();
    }
    return ok;
  }
}

/** The bearer token a request presents, or undefined. */
function bearer(req: IncomingMessage): string | undefined {
  return /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '')?.[1].trim();
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/** Are two secrets the same? Hashed first, as BearerAuth does, so the compare is constant-time whatever the lengths. */
export function sameSecret(a: string, b: string): boolean {
  return timingSafeEqual(digest(a), digest(b));
}

export const AUTH_CHALLENGE = 'Bearer realm="svc"';
