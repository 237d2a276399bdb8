import type { Registry } from 'prom-client';
import { stringify } from 'yaml';
import { queryInt, type Query } from '../../domain/query.js';
import type { ActivityLog } from '../../ports/stores.js';
import type { RouteDef } from '../http-kit/route.js';

export interface SystemDeps {
  version: string;
  hypervisor: string;
  registry: Registry;
  activity: ActivityLog;
  openapi: () => object;
}

export function systemRoutes(d: SystemDeps): RouteDef[] {
  let yamlDoc: string | undefined;
  const doc = () => (yamlDoc ??= stringify(d.openapi(), { aliasDuplicateObjects: false }));
  return [
    { method: 'get', path: '/healthz', auth: 'none', handler: (_req, res) => void res.json({ status: 'ok' }) },
    {
      method: 'get',
      path: '/info',
      handler: (_req, res) =>
        void res.json({ name: 'svc', version: d.version, api_version: '0.2.2', hypervisor: d.hypervisor }),
    },
    {
      method: 'get',
      path: '/metrics',
      handler: async (_req, res) => {
        res.type(d.registry.contentType).send(await d.registry.metrics());
      },
    },
    { method: 'get', path: '/openapi.yaml', handler: (_req, res) => void res.type('application/yaml').send(doc()) },
    // The spec keeps the YAML content type on the .json path too.
    { method: 'get', path: '/openapi.json', handler: (_req, res) => void res.type('application/yaml').send(doc()) },
    {
      method: 'get',
      path: '/activity',
      handler: async (req, res) => {
        const limit = queryInt(req.query as Query, 'limit', 1000);
        const since = queryInt(req.query as Query, 'since', Number.MAX_SAFE_INTEGER);
        res.json({ events: await d.activity.list({ limit, since }) });
      },
    },
  ];
}
