import type { InstanceService } from '../../app/instance-service.js';
import type { RouteDef } from './route.js';
import { queryString } from './route.js';
import { toHttpError } from './error-status.js';
import { writeNdjson } from './ndjson.js';

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
