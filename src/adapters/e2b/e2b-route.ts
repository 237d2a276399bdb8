import type { Request, Response } from 'express';
import { InvalidArgumentError } from '../../domain/errors.js';
import { toHttpError } from '../http-kit/error-status.js';
import { drainBody } from '../http-kit/http-app.js';
import type { RouteDef } from '../http-kit/route.js';
import { SvcError } from '../client/svc-client.js';
import type { Sandboxes } from './sandboxes.js';

type Handler = (req: Request, res: Response) => Promise<void>;

/**
 * Routes of E2B's control API under `/e2b`: each checks the API key (unless `key: false`, for a
 * link that carries its own signature) and answers errors in E2B's shape, `{code, message}`.
 */
export function e2bRouter(boxes: Sandboxes) {
  return (method: RouteDef['method'], path: string, fn: Handler, o: { key?: false; raw?: true } = {}): RouteDef => ({
    method,
    path: `/e2b${path}`,
    auth: 'none',
    body: o.raw ? 'raw' : 'json',
    handler: async (req, res) => {
      try {
        if (o.key !== false) await boxes.checkApiKey(req);
        await fn(req, res);
      } catch (err) {
        drainBody(req);
        const status = err instanceof SvcError ? err.status || 503 : toHttpError(err).status;
        if (!res.headersSent) res.status(status).json({ code: status, message: (err as Error).message });
        else res.destroy();
      }
    },
  });
}

/** One page of `all` by E2B's `limit` and `nextToken`; the next page's token in `x-next-token`. */
export function page(req: Request, res: Response, all: readonly unknown[]): void {
  const q = req.query as Record<string, string | undefined>;
  const limit = q.limit === undefined ? 100 : Number(q.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
    throw new InvalidArgumentError('limit must be an integer from 1 to 1000');
  const start = q.nextToken ? Number(q.nextToken) : 0;
  if (!Number.isInteger(start) || start < 0) throw new InvalidArgumentError('nextToken is not one svc gave');
  const rest = all.slice(start);
  if (rest.length > limit) res.setHeader('x-next-token', String(start + limit));
  res.json(rest.slice(0, limit));
}
