import type { Response } from 'express';
import type { InstanceService } from '../../app/instance-service.js';
import type { RouteDef } from './route.js';
import { queryString } from './route.js';
import { toHttpError } from './error-status.js';

/** Writes an AsyncIterable of objects as NDJSON; stops reading when the client goes away. */
export async function writeNdjson(res: Response, events: AsyncIterable<object>): Promise<void> {
  res.status(200).type('application/x-ndjson');
  res.setHeader('Cache-Control', 'no-store');
  res.flushHeaders();
  for await (const ev of events) {
    if (res.destroyed || res.writableEnded) break;
    if (!res.write(JSON.stringify(ev) + '\n')) {
      await new Promise<void>((r) => { res.once('drain', r); res.once('close', r); });
    }
  }
  if (!res.writableEnded) res.end();
}

export function vmRoutes(instances: InstanceService): RouteDef[] {
  const verb = (path: string, fn: (name: string) => Promise<unknown>): RouteDef => ({
    method: 'post', path, handler: async (req, res) => void res.json(await fn(String(req.params.name))),
  });
  return [
    { method: 'get', path: '/vms', handler: (_req, res) => void res.json(instances.list()) },
    {
      method: 'post', path: '/vms',
      handler: async (req, res) => {
        const stream = queryString(req, 'stream') === '1' || /application\/x-ndjson/.test(req.headers.accept ?? '');
        const job = await instances.create(req.body, { wait: req.query.wait, timeout: req.query.timeout });
        if (stream) return writeNdjson(res, job.events);
        try {
          res.status(201).json(await job.done);
        } catch (err) {
          const e = toHttpError(err);
          // A create that was accepted and then failed is the host's failure, not the caller's.
          res.status(e.body.code === 'deadline_exceeded' ? 504 : 500).json(e.body);
        }
      },
    },
    { method: 'get', path: '/vms/:name', handler: (req, res) => void res.json(instances.get(String(req.params.name))) },
    { method: 'delete', path: '/vms/:name', handler: async (req, res) => void res.json(await instances.delete(String(req.params.name))) },
    verb('/vms/:name/start', (n) => instances.start(n)),
    verb('/vms/:name/shutdown', (n) => instances.shutdown(n)),
    verb('/vms/:name/pause', (n) => instances.pause(n)),
    verb('/vms/:name/resume', (n) => instances.resume(n)),
    verb('/vms/:name/suspend', (n) => instances.suspend(n)),
    verb('/vms/:name/restore', (n) => instances.restore(n)),
  ];
}
