import type { IncomingMessage, ServerResponse } from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Logger } from '../../ports/logger.js';
import { AUTH_CHALLENGE, type BearerAuth } from './auth.js';
import { toHttpError, writeHttpError } from './error-status.js';
import { hasBody, pathMatcher, type RouteDef } from './route.js';
import type { RequestMetrics } from './request-metrics.js';

export const JSON_LIMIT_BYTES = 1024 * 1024;

export interface HttpAppDeps {
  routes: RouteDef[];
  auth: BearerAuth;
  /** Where request counts and latencies go; without them none are kept (the guest agent serves no metrics). */
  metrics?: RequestMetrics;
  log: Logger;
  /** Runs after auth and before the routes (the cluster's front: docs/cluster.md). */
  front?: express.RequestHandler;
}

/**
 * Builds the express app: request metrics (when given), bearer auth (when a token is set; all but routes marked `auth: 'none'`), a 1 MiB JSON body
 * limit, the routes, 405/404 for everything else, and one error handler that speaks `{error}`.
 */
export function createHttpApp(d: HttpAppDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');

  const metrics = d.metrics;
  if (metrics)
    app.use((req, res, next) => {
      metrics.time(req, res, () => (res.locals.route as string | undefined) ?? 'unmatched');
      next();
    });
  if (d.auth.enabled) app.use(bearerAuth(d.routes, d.auth));
  if (d.front) app.use(d.front);

  const json = express.json({ limit: JSON_LIMIT_BYTES, strict: false });
  const jsonBody = (req: Request, res: Response, next: NextFunction) => {
    if (!hasBody(req)) return next();
    if (!req.is('application/json')) {
      return void res.status(400).json({ error: 'request body must be application/json', code: 'invalid_argument' });
    }
    return json(req, res, next);
  };

  for (const r of d.routes) {
    const body =
      r.body === 'json' || (r.body !== 'raw' && (r.method === 'post' || r.method === 'delete')) ? [jsonBody] : [];
    app[r.method](
      r.path,
      (_req, res, next) => {
        res.locals.route = r.path;
        next();
      },
      ...body,
      r.handler,
    );
  }

  const matchers = d.routes.map((r) => ({ re: pathMatcher(r.path), method: r.method.toUpperCase() }));
  app.use((req, res) => {
    const allowed = [...new Set(matchers.filter((m) => m.re.test(req.path)).map((m) => m.method))];
    if (allowed.length > 0) {
      if (allowed.includes('GET')) allowed.push('HEAD');
      res.setHeader('Allow', allowed.join(', '));
      return void res.status(405).json({
        error: `method ${req.method} not allowed on ${req.path}; use ${allowed.join(', ')}`,
        code: 'invalid_argument',
      });
    }
    res.status(404).json({ error: `no route ${req.method} ${req.path}`, code: 'not_found' });
  });

  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    drainBody(req);
    const e = err as { type?: string; status?: number; message?: string };
    if (e?.type === 'entity.too.large') {
      return void res
        .status(413)
        .json({ error: `request body larger than ${JSON_LIMIT_BYTES} bytes`, code: 'payload_too_large' });
    }
    if (e?.type === 'entity.parse.failed') {
      return void res.status(400).json({ error: `invalid JSON body: ${e.message}`, code: 'invalid_argument' });
    }
    // express could not decode a path parameter (`/vms/%zz`): the caller's mistake
    if (err instanceof URIError && e.status === 400) {
      return void res
        .status(400)
        .json({ error: `malformed percent-encoding in the path: ${e.message}`, code: 'invalid_argument' });
    }
    if (typeof e?.status === 'number' && e.status >= 400 && e.status < 500 && e.type) {
      return void res.status(e.status).json({ error: e.message ?? 'bad request', code: 'invalid_argument' });
    }
    answerError(err, req, res, d.log);
  });
  return app;
}

/**
 * Answers a call that failed with the API's `{error, code}` (toHttpError), logging one that is the
 * daemon's fault (5xx) by its path, never its query (an exec's arguments); a call whose answer had
 * begun is cut off instead. What is left of its body is dropped.
 */
export function answerError(err: unknown, req: IncomingMessage, res: ServerResponse, log: Logger): void {
  drainBody(req);
  const { status, body } = toHttpError(err);
  if (status >= 500)
    log.error({ method: req.method, path: (req.url ?? '').split('?')[0], err: body.error }, 'request failed');
  if (res.headersSent) return void res.destroy();
  writeHttpError(res, err, false);
}

/**
 * What is left of the body of a call that failed is read and dropped, whoever was reading it (an
 * upload's file, the agent's request, the JSON parser past its limit): Node reads an untouched
 * body on its own, but not one that was piped somewhere and left, and a caller still sending it
 * would wait for ever for room on the connection, never reading the answer (an upload to a full disk).
 */
export function drainBody(req: IncomingMessage): void {
  if (req.complete || req.destroyed) return;
  req.unpipe();
  req.resume();
}

/** The bearer token on every route but those marked `auth: 'none'`. */
function bearerAuth(routes: RouteDef[], auth: BearerAuth): express.RequestHandler {
  const open = routes
    .filter((r) => r.auth === 'none')
    .map((r) => ({ re: pathMatcher(r.path), method: r.method.toUpperCase() }));
  return (req, res, next) => {
    if (
      open.some(
        (o) => (o.method === req.method || (o.method === 'GET' && req.method === 'HEAD')) && o.re.test(req.path),
      )
    )
      return next();
    auth.verify(req).then((ok) => (ok ? next() : unauthenticated(res)), next);
  };
}

/** The answer to a call without a valid token (401, and how to authenticate). */
export function unauthenticated(res: ServerResponse): void {
  res.writeHead(401, { 'WWW-Authenticate': AUTH_CHALLENGE, 'Content-Type': 'application/json; charset=utf-8' });
  res.end(JSON.stringify({ error: 'missing or invalid bearer token', code: 'unauthenticated' }));
}
