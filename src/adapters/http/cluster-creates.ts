import express, { type Request, type Response } from 'express';
import type { ClusterPlacement, Placed } from '../../app/cluster-placement.js';
import type { ImageFetchService } from '../../app/image-fetch-service.js';
import { InvalidArgumentError, UnavailableError } from '../../domain/errors.js';
import type { ImageFetchProgress } from '../../domain/image-fetch.js';
import { toHttpError } from '../http-kit/error-status.js';
import { JSON_LIMIT_BYTES } from '../http-kit/http-app.js';
import { wantsNdjson } from '../http-kit/ndjson.js';
import { proxyRequest, type ProxyTarget } from '../http-kit/node-proxy.js';

/**
 * Creates, clones and forks that reach the cluster's front (docs/cluster.md, "Placement"): placed
 * by the rule with their room reserved in etcd, the image fetched to the chosen node first when it
 * lacks it, then sent to that node (this one too, over its own socket). A call the node made
 * nothing of gives its room back.
 */
export class ClusterCreates {
  constructor(
    private readonly o: {
      placement: ClusterPlacement;
      fetches: ImageFetchService;
      /** Where a placed call goes: this node's own socket, or the chosen node's API. */
      target: (placed: Placed) => ProxyTarget;
    },
  ) {}

  async create(req: Request, res: Response, raw?: unknown): Promise<void> {
    const stream = wantsNdjson(req);
    const placed = await this.o.placement.place(raw ?? (await readJson(req)));
    const { image, from } = placed.body;
    const id = typeof image === 'string' ? image : 'default';
    // A node placed without the image fetches it from one that has it first.
    if (from === undefined && !placed.node.images.includes(id)) {
      const t0 = Date.now();
      // A streamed create says how far the fetch is, as its `image` phase, before the node's own lines.
      const say = (p: ImageFetchProgress) => {
        if (!res.headersSent) {
          res.status(200).type('application/x-ndjson').setHeader('Cache-Control', 'no-store');
          res.flushHeaders();
        }
        const percent = p.total ? Math.floor((100 * p.bytes) / p.total) : 100;
        res.write(
          JSON.stringify({
            phase: 'image',
            name: placed.name,
            message: `fetching image ${p.image} from node ${p.from} to node ${placed.node.node}: ${mib(p.bytes)} of ${mib(p.total)} MiB`,
            percent,
            t: new Date().toISOString(),
            elapsed_ms: Date.now() - t0,
          }) + '\n',
        );
      };
      try {
        await this.o.fetches.ensureOn(placed.node, id, stream ? say : undefined);
      } catch (err) {
        await this.o.placement.unplace(placed.name);
        if (!res.headersSent) throw err;
        const { body } = toHttpError(err);
        return void res.end(createError(placed.name, body.error, body.code));
      }
    }
    await this.send(req, res, placed, [placed.name]);
  }

  /** `POST /vms/{name}/clone` is a create from the template: placed as one. */
  async clone(req: Request, res: Response, template: string): Promise<void> {
    const raw = await readJson(req);
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
      throw new InvalidArgumentError('clone body must be a JSON object');
    if ('from' in raw || 'from_pool' in raw)
      throw new InvalidArgumentError('the template is the path name; do not give from or from_pool');
    req.url = `/vms${new URL(req.originalUrl, 'http://svcd').search}`;
    return this.create(req, res, { ...raw, from: template });
  }

  async fork(req: Request, res: Response, source: string): Promise<void> {
    const placed = await this.o.placement.placeForks(source, await readJson(req));
    await this.send(req, res, placed, placed.names);
  }

  /** Sends a placed call to its node; what it made nothing of gives its reservations back. */
  private async send(req: Request, res: Response, placed: Placed, names: string[]): Promise<void> {
    const t = this.o.target(placed);
    const unplace = () => this.o.placement.unplace(names);
    // After lines of its own (an image fetched first), an error answer is the stream's last line.
    const errorLine = (status: number, text: string) => {
      let body: { error?: unknown; code?: unknown } = {};
      try {
        body = JSON.parse(text) as typeof body;
      } catch {
        /* not JSON: said as it came */
      }
      return createError(
        placed.name,
        typeof body.error === 'string'
          ? body.error
          : `node ${placed.node.node} answered ${status}: ${text.slice(0, 200)}`,
        typeof body.code === 'string' ? body.code : 'internal',
      );
    };
    const failed = (err: Error) => {
      void unplace();
      const e = new UnavailableError(`node ${placed.node.node} did not answer: ${err.message}`);
      if (!res.headersSent) throw e;
      res.end(errorLine(503, JSON.stringify({ error: e.message, code: e.code })));
      return 503;
    };
    const status = await proxyRequest(req, res, t, Buffer.from(JSON.stringify(placed.body)), errorLine).catch(failed);
    if (status >= 400) await unplace();
  }
}

const json = express.json({ limit: JSON_LIMIT_BYTES, strict: false });

/** A create's last NDJSON line when it failed: as the create service writes one (phase `error`). */
function createError(name: string, error: string, code: string): string {
  const t = new Date().toISOString();
  return JSON.stringify({ phase: 'error', name, message: error, error, code, t, elapsed_ms: 0 }) + '\n';
}

const mib = (n: number) => (n / 1024 / 1024).toFixed(n < 10 * 1024 * 1024 ? 1 : 0);

/** The request's JSON body (the create's), parsed by express's own parser with the API's limit. */
function readJson(req: Request): Promise<unknown> {
  const has = Number(req.headers['content-length'] ?? 0) > 0 || req.headers['transfer-encoding'] !== undefined;
  if (!has) return Promise.resolve(undefined);
  if (!req.is('application/json'))
    return Promise.reject(new InvalidArgumentError('request body must be application/json'));
  return new Promise((resolve, reject) =>
    json(req, {} as Response, (err?: unknown) => (err ? reject(err) : resolve(req.body))),
  );
}
