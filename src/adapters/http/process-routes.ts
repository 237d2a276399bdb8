import type { Request } from 'express';
import type { ProcessProxy } from '../../app/process-proxy.js';
import { parseOutputStart, TIMELINE_HEADER } from '../../domain/processes.js';
import { parseBool, queryOne, type Query } from '../../domain/query.js';
import { followNdjson } from '../http-kit/ndjson.js';
import type { RouteDef } from '../http-kit/route.js';

/** Durable processes and watches in a VM (docs/processes.md): /vms/{name}/processes..., /watch, /watches. */
export function processRoutes(p: ProcessProxy): RouteDef[] {
  const q = (req: Request) => req.query as Query;
  const vm = (req: Request) => String(req.params.name);
  const id = (req: Request) => String(req.params.id);
  return [
    {
      method: 'post',
      path: '/vms/:name/processes',
      handler: async (req, res) => void res.status(201).json(await p.start(vm(req), req.body)),
    },
    { method: 'get', path: '/vms/:name/processes', handler: async (req, res) => void res.json(await p.list(vm(req))) },
    {
      method: 'get',
      path: '/vms/:name/processes/:id',
      handler: async (req, res) => void res.json(await p.get(vm(req), id(req))),
    },
    {
      method: 'get',
      path: '/vms/:name/processes/:id/output',
      handler: async (req, res) => {
        const { tail } = parseOutputStart(q(req));
        const from = queryOne(q(req), 'from') || undefined;
        const follows = parseBool(q(req), 'follow', false);
        const timeline = queryOne(q(req), 'timeline') || undefined;
        // The timeline these offsets are on, for the reader's next `timeline=` (docs/processes.md).
        res.setHeader(TIMELINE_HEADER, p.timeline(vm(req)));
        await followNdjson(res, (signal) =>
          p.output(vm(req), id(req), { from, tail, follow: follows, timeline }, signal),
        );
      },
    },
    {
      method: 'post',
      path: '/vms/:name/processes/:id/stdin',
      body: 'raw',
      handler: async (req, res) => {
        await p.stdin(vm(req), id(req), req, parseBool(q(req), 'eof', false));
        res.status(204).end();
      },
    },
    {
      method: 'post',
      path: '/vms/:name/processes/:id/signal',
      handler: async (req, res) => {
        await p.signal(vm(req), id(req), (req.body as { signal?: unknown } | undefined)?.signal);
        res.status(204).end();
      },
    },
    {
      method: 'post',
      path: '/vms/:name/processes/:id/resize',
      handler: async (req, res) => void (await p.resize(vm(req), id(req), req.body), res.status(204).end()),
    },
    {
      method: 'delete',
      path: '/vms/:name/processes/:id',
      handler: async (req, res) => {
        await p.remove(vm(req), id(req));
        res.json({ message: `process ${id(req)} of vm ${vm(req)} removed`, name: vm(req), id: id(req) });
      },
    },
    {
      method: 'get',
      path: '/vms/:name/watch',
      handler: async (req, res) => {
        const o = {
          path: queryOne(q(req), 'path') || undefined,
          recursive: parseBool(q(req), 'recursive', false),
          from: queryOne(q(req), 'from') || undefined,
        };
        await followNdjson(res, (signal) => p.watch(vm(req), o, signal));
      },
    },
    { method: 'get', path: '/vms/:name/watches', handler: async (req, res) => void res.json(await p.watches(vm(req))) },
    {
      method: 'delete',
      path: '/vms/:name/watches/:id',
      handler: async (req, res) => {
        await p.removeWatch(vm(req), id(req));
        res.json({ message: `watch ${id(req)} of vm ${vm(req)} removed`, name: vm(req), id: id(req) });
      },
    },
  ];
}
