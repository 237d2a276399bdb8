import type { Request } from 'express';
import { NotFoundError, NotSupportedError } from '../../domain/errors.js';
import type { RouteDef } from '../http-kit/route.js';
import type { SvcClient } from '../client/svc-client.js';
import { e2bRouter } from './e2b-route.js';
import type { Sandboxes } from './sandboxes.js';
import { findTemplate, templateOf, type BuildSpec, type TemplateBuilds } from './templates.js';

/**
 * E2B's template build API (what `Template.build` calls, docs/e2b.md): request a build, upload
 * each COPY's files, start it, poll its status and log; an alias check; tags are accepted and
 * name the newest build.
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
    // svc keeps one build per name, so a tag names that build and there are no tags to move.
    ...(['post', 'delete'] as const).map((m) =>
      route(m, '/templates/tags', async () => {
        throw new NotSupportedError(
          'svc keeps the newest build of a template name only; it keeps no tags to assign or remove',
        );
      }),
    ),
    route('get', '/templates/:templateID/tags', async () => {
      throw new NotSupportedError('svc keeps the newest build of a template name only; it keeps no tags');
    }),
    route('get', '/templates/aliases/:alias', async (req, res) => {
      const alias = p(req, 'alias');
      const vm = findTemplate(await client.list(), alias);
      const templateID = vm ? templateOf(vm)?.templateID : builds.pendingName(alias);
      if (!templateID) throw new NotFoundError(`template alias ${alias} not found`);
      res.json({ templateID, public: false });
    }),
  ];
}
