import type { Request } from 'express';
import type { ProcessService } from '../../app/agent/process-service.js';
import type { WatchService } from '../../app/agent/watch-service.js';
import { InvalidArgumentError } from '../../domain/errors.js';
import { parseOutputStart, parseProcessStart, termSize } from '../../domain/processes.js';
import { parseBool, queryOne, type Query } from '../../domain/query.js';
import { followNdjson, pumpTo } from '../http-kit/ndjson.js';
import { framesOf, pieceChunks, PIECES_TYPE } from '../http-kit/output-pieces.js';
import type { RouteDef } from '../http-kit/route.js';

/** The agent's durable processes and watches (docs/processes.md). */
export function processRoutes(processes: ProcessService, watches: WatchService): RouteDef[] {
  const q = (req: Request) => req.query as Query;
  const id = (req: Request) => String(req.params.id);
  return [
    {
      method: 'post',
      path: '/processes',
      handler: async (req, res) => void res.status(201).json(await processes.start(parseProcessStart(req.body))),
    },
    { method: 'get', path: '/processes', handler: async (_req, res) => void res.json(await processes.list()) },
    { method: 'get', path: '/processes/:id', handler: async (req, res) => void res.json(await processes.get(id(req))) },
    {
      method: 'get',
      path: '/processes/:id/output',
      handler: async (req, res) => {
        const start = parseOutputStart(q(req));
        const follows = parseBool(q(req), 'follow', false);
        if (!parseBool(q(req), 'raw', false))
          return followNdjson(res, async (signal) => framesOf(await processes.output(id(req), start, follows, signal)));
        // The daemon's way: the bytes as they are, encoded into frames on the host (output-pieces.ts)
        const gone = new AbortController();
        const pieces = await processes.output(id(req), start, follows, gone.signal);
        res.status(200).type(PIECES_TYPE);
        res.setHeader('Cache-Control', 'no-store');
        res.flushHeaders();
        await pumpTo(res, pieceChunks(pieces), () => gone.abort());
      },
    },
    {
      method: 'post',
      path: '/processes/:id/stdin',
      body: 'raw',
      handler: async (req, res) => {
        await processes.stdin(id(req), req, parseBool(q(req), 'eof', false));
        res.status(204).end();
      },
    },
    {
      method: 'post',
      path: '/processes/:id/signal',
      handler: async (req, res) => {
        await processes.signal(id(req), (req.body as { signal?: unknown } | undefined)?.signal ?? 'SIGTERM');
        res.status(204).end();
      },
    },
    {
      method: 'post',
      path: '/processes/:id/resize',
      handler: async (req, res) => {
        const b = (req.body ?? {}) as { cols?: unknown; rows?: unknown };
        if (b.cols === undefined || b.rows === undefined) throw new InvalidArgumentError('cols and rows are required');
        await processes.resize(id(req), termSize(b.cols, 'cols', 80), termSize(b.rows, 'rows', 24));
        res.status(204).end();
      },
    },
    {
      method: 'delete',
      path: '/processes/:id',
      handler: async (req, res) => void (await processes.remove(id(req)), res.status(204).end()),
    },
    {
      method: 'get',
      path: '/watch',
      handler: async (req, res) => {
        const cursor = queryOne(q(req), 'from') || undefined;
        const path = queryOne(q(req), 'path') || undefined;
        const recursive = parseBool(q(req), 'recursive', false);
        await followNdjson(res, (signal) => watches.events({ cursor, path, recursive }, signal));
      },
    },
    { method: 'get', path: '/watches', handler: async (_req, res) => void res.json(await watches.list()) },
    {
      method: 'delete',
      path: '/watches/:id',
      handler: async (req, res) => void (await watches.remove(id(req)), res.status(204).end()),
    },
  ];
}
