import type { SecretService } from '../../app/secret-service.js';
import type { RouteDef } from '../http-kit/route.js';

export function secretRoutes(secrets: SecretService): RouteDef[] {
  return [
    { method: 'get', path: '/secrets', handler: async (_req, res) => void res.json(await secrets.list()) },
    { method: 'post', path: '/secrets', handler: async (req, res) => void res.json(await secrets.put(req.body)) },
    {
      method: 'delete',
      path: '/secrets/:name',
      handler: async (req, res) => void res.json(await secrets.remove(String(req.params.name))),
    },
  ];
}
