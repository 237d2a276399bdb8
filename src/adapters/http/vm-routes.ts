import type { Response } from 'express';
import type { CreateJob, CreateService } from '../../app/create-service.js';
import type { ForkService } from '../../app/fork-service.js';
import type { LifetimeService } from '../../app/lifetime-service.js';
import { parseLifetimeChange } from '../../domain/lifetime.js';
import type { VmEdit } from '../../app/vm-edit.js';
import type { VmLifecycle } from '../../app/vm-lifecycle.js';
import { parseShapeChange } from '../../domain/create-request.js';
import type { Vms } from '../../app/vms.js';
import { AcceptedCreateFailedError, InvalidArgumentError, isDomainError } from '../../domain/errors.js';
import { toPublic } from '../../domain/vm.js';
import { parseBool, type Query } from '../../domain/query.js';
import type { RouteDef } from '../http-kit/route.js';
import { wantsNdjson, writeNdjson } from '../http-kit/ndjson.js';

/**
 * Answers a create or a fork: NDJSON progress when asked for (`stream`, read before the job
 * began), else 201 with what it made once ready. A failure after the job was accepted is the
 * domain error wrapped as AcceptedCreateFailedError (500, or 504 at the deadline).
 */
async function answerCreate<T>(
  res: Response,
  stream: boolean,
  job: { events: CreateJob['events']; done: Promise<T> },
): Promise<void> {
  if (stream) return writeNdjson(res, job.events);
  const made = await job.done.catch((err: unknown) => {
    throw isDomainError(err) ? new AcceptedCreateFailedError(err) : err;
  });
  res.status(201).json(made);
}

export function vmRoutes({
  vms,
  lifecycle,
  creates,
  forks,
  lifetimes,
  edits,
}: {
  vms: Vms;
  lifecycle: VmLifecycle;
  creates: CreateService;
  forks: ForkService;
  lifetimes: LifetimeService;
  edits: VmEdit;
}): RouteDef[] {
  const verb = (path: string, fn: (name: string, query: Query) => Promise<unknown>): RouteDef => ({
    method: 'post',
    path,
    handler: async (req, res) => void res.json(await fn(String(req.params.name), req.query as Query)),
  });
  return [
    { method: 'get', path: '/vms', handler: (_req, res) => void res.json(vms.list()) },
    {
      method: 'post',
      path: '/vms',
      handler: async (req, res) => {
        const stream = wantsNdjson(req);
        return answerCreate(
          res,
          stream,
          await creates.create(req.body, { wait: req.query.wait, timeout: req.query.timeout }),
        );
      },
    },
    {
      // Sugar for POST /vms {from: name, ...}: clone a stopped or suspended persistent vm.
      method: 'post',
      path: '/vms/:name/clone',
      handler: async (req, res) => {
        const body = (req.body ?? {}) as Record<string, unknown>;
        if (typeof body !== 'object' || Array.isArray(body))
          throw new InvalidArgumentError('clone body must be a JSON object');
        if ('from' in body || 'from_pool' in body)
          throw new InvalidArgumentError('the template is the path name; do not give from or from_pool');
        const stream = wantsNdjson(req);
        return answerCreate(
          res,
          stream,
          await creates.create(
            { ...body, from: String(req.params.name) },
            { wait: req.query.wait, timeout: req.query.timeout },
          ),
        );
      },
    },
    {
      // Forks of a running vm: 201 with all of them once ready (or an error and none), or NDJSON progress.
      method: 'post',
      path: '/vms/:name/fork',
      handler: async (req, res) => {
        const stream = wantsNdjson(req);
        return answerCreate(
          res,
          stream,
          await forks.fork(String(req.params.name), req.body, { wait: req.query.wait, timeout: req.query.timeout }),
        );
      },
    },
    {
      method: 'get',
      path: '/vms/:name',
      handler: (req, res) => void res.json(toPublic(vms.get(String(req.params.name)))),
    },
    {
      method: 'delete',
      path: '/vms/:name',
      handler: async (req, res) => void res.json(await lifecycle.delete(String(req.params.name))),
    },
    {
      // A stopped VM's shape: {cpus?, memory_mb?, disk_gb?} (a disk only grows).
      method: 'patch',
      path: '/vms/:name',
      body: 'json',
      handler: async (req, res) => void res.json(await edits.edit(String(req.params.name), parseShapeChange(req.body))),
    },
    {
      // Its lifetime from now: {ttl: "30m" | 1800 | null, on_expire?: delete | suspend}.
      method: 'put',
      path: '/vms/:name/ttl',
      body: 'json',
      handler: async (req, res) =>
        void res.json(await lifetimes.set(String(req.params.name), parseLifetimeChange(req.body))),
    },
    verb('/vms/:name/start', (n) => lifecycle.start(n)),
    verb('/vms/:name/shutdown', (n) => lifecycle.shutdown(n)),
    verb('/vms/:name/pause', (n) => lifecycle.pause(n)),
    verb('/vms/:name/resume', (n) => lifecycle.resume(n)),
    verb('/vms/:name/suspend', (n) => lifecycle.suspend(n)),
    // ?paused=true: the guest stays paused once loaded (a paused VM's move).
    verb('/vms/:name/restore', (n, q) => lifecycle.restore(n, { paused: parseBool(q, 'paused', false) })),
  ];
}
