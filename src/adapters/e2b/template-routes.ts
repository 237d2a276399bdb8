import type { Request } from 'express';
import { NotFoundError } from '../../domain/errors.js';
import type { RouteDef } from '../http-kit/route.js';
import type { SvcClient } from '../client/svc-client.js';
import { e2bRouter } from './e2b-route.js';
import type { Sandboxes } from './sandboxes.js';
import { buildsOf, checkTags } from './template-tags.js';
import { templateOf, type BuildSpec, type TemplateBuilds } from './templates.js';

/**
 * E2B's template build API (what `Template.build` calls, docs/e2b.md): request a build, upload
 * each COPY's files, start it, poll its status and log; an alias check; a template's tags
 * (template-tags.ts).
 */
export function e2bTemplateRoutes(client: SvcClient, boxes: Sandboxes, builds: TemplateBuilds): RouteDef[] {
  const route = e2bRouter(boxes);
  const p = (req: Request, k: string) => String(req.params[k]);
  return [
    route('post', '/v3/templates', async (req, res) => {
      res.status(202).json(builds.request((req.body ?? {}) as Record<string, unknown>));
    }),
    route('get', '/templates/:templateID/files/:hash', async (req, res) => {
      const origin = `${req.protocol}://${req.headers.host ?? '127.0.0.1'}`;
      res.status(201).json(await builds.uploadLink(p(req, 'templateID'), p(req, 'hash'), origin));
    }),
    route(
      'put',
      '/templates/:templateID/files/:hash',
      async (req, res) => {
        const token = String((req.query as Record<string, unknown>).token ?? '');
        await builds.upload(p(req, 'templateID'), p(req, 'hash'), token, Number(req.headers['content-length']), req);
        res.status(201).end();
      },
      { key: false, raw: true },
    ),
    route('post', '/v2/templates/:templateID/builds/:buildID', async (req, res) => {
      await builds.start(p(req, 'templateID'), p(req, 'buildID'), (req.body ?? {}) as BuildSpec);
      res.status(202).end();
    }),
    route('get', '/templates/:templateID/builds/:buildID/status', async (req, res) => {
      const offset = Number((req.query as Record<string, unknown>).logsOffset ?? 0) || 0;
      res.json(builds.status(p(req, 'templateID'), p(req, 'buildID'), offset));
    }),
    route('post', '/templates/tags', async (req, res) => {
      const body = (req.body ?? {}) as { target?: unknown; tags?: unknown };
      res.status(201).json(await builds.tags.assign(String(body.target ?? ''), checkTags(body.tags)));
    }),
    route('delete', '/templates/tags', async (req, res) => {
      const body = (req.body ?? {}) as { name?: unknown; tags?: unknown };
      await builds.tags.remove(String(body.name ?? ''), checkTags(body.tags));
      res.status(204).end();
    }),
    route('get', '/templates/:templateID/tags', async (req, res) => {
      res.json(await builds.tags.list(p(req, 'templateID')));
    }),
    route('get', '/templates/aliases/:alias', async (req, res) => {
      const alias = p(req, 'alias');
      const [vm] = buildsOf(await client.list(), alias);
      const templateID = vm ? templateOf(vm)?.templateID : builds.pendingName(alias);
      if (!templateID) throw new NotFoundError(`template alias ${alias} not found`);
      res.json({ templateID, public: false });
    }),
  ];
}
