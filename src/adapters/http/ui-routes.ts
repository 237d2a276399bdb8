import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { UnauthenticatedError } from '../../domain/errors.js';
import type { BearerAuth } from '../http-kit/auth.js';
import type { RouteDef } from '../http-kit/route.js';
import type { BrowserSessions } from '../http-kit/sessions.js';

/** Where `npm run build` puts the dashboard (scripts/build-ui.mjs). */
export const UI_DIST = fileURLToPath(new URL('../../../ui/', import.meta.url));

/** The files the dashboard is made of; nothing else under /ui/ is served. */
const FILES: Record<string, string> = {
  'index.html': 'text/html; charset=utf-8',
  'app.js': 'text/javascript; charset=utf-8',
  'app.css': 'text/css; charset=utf-8',
};

/**
 * The page may load only its own files and talk only to its own daemon; no frames (clickjacking),
 * no referrer. xterm.js and uPlot set inline styles from script, hence `'unsafe-inline'` for styles
 * (never for scripts).
 */
const PAGE_HEADERS: Record<string, string> = {
  'Content-Security-Policy':
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'X-Frame-Options': 'DENY',
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'Cache-Control': 'no-cache',
};

/**
 * The web dashboard (docs/dashboard.md): its static files at /ui/ and its log-in. The files hold
 * no data and are served without auth; everything they call is behind auth as usual. With a token
 * configured, `POST /ui/session {token}` trades the token for a session id (expiring) that stands
 * for it in the `X-Svc-Session` header (sessions.ts says why not a cookie); `DELETE /ui/session`
 * with it logs out.
 */
export function uiRoutes(auth: BearerAuth, sessions: BrowserSessions, dir = UI_DIST): RouteDef[] {
  const serve =
    (file: string): RouteDef['handler'] =>
    async (_req, res) => {
      const body = await readFile(join(dir, file)).catch(() => undefined);
      if (body === undefined) {
        return void res.status(503).json({ error: 'the dashboard is not built; run npm run build', code: 'internal' });
      }
      res.set(PAGE_HEADERS).type(FILES[file]).send(body);
    };
  return [
    {
      // Express matches /ui and /ui/ alike; the page's relative links need the slash.
      method: 'get',
      path: '/ui',
      auth: 'none',
      handler: (req, res) => (req.path.endsWith('/') ? serve('index.html')(req, res) : res.redirect(308, '/ui/')),
    },
    {
      method: 'get',
      path: '/ui/session',
      auth: 'none',
      handler: async (req, res) =>
        void res
          .set('Cache-Control', 'no-store')
          .json({ token_required: auth.enabled, authenticated: await auth.verify(req) }),
    },
    {
      method: 'post',
      path: '/ui/session',
      auth: 'none',
      handler: async (req, res) => {
        if (!auth.enabled) return void res.json({ token_required: false, authenticated: true });
        const token = (req.body as { token?: unknown } | undefined)?.token;
        if (typeof token !== 'string' || !(await auth.matchesSlowly(req, token.trim())))
          throw new UnauthenticatedError('wrong token');
        res.set('Cache-Control', 'no-store').json({
          token_required: true,
          authenticated: true,
          session: sessions.open(),
          expires_in_sec: Math.floor(sessions.ttlMs / 1000),
        });
      },
    },
    {
      method: 'delete',
      path: '/ui/session',
      auth: 'none',
      handler: (req, res) => {
        sessions.close(req);
        res.status(204).end();
      },
    },
    {
      method: 'get',
      path: '/ui/:file',
      auth: 'none',
      handler: async (req, res) => {
        const file = String(req.params.file);
        if (!Object.hasOwn(FILES, file))
          return void res.status(404).json({ error: `no dashboard file ${file.slice(0, 100)}`, code: 'not_found' });
        return serve(file)(req, res);
      },
    },
  ];
}
