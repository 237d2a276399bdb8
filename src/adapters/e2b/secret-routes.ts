import type { Request } from 'express';
import type { SvcClient } from '../client/svc-client.js';
import type { RouteDef } from '../http-kit/route.js';
import { e2bRouter, page } from './e2b-route.js';
import type { Sandboxes } from './sandboxes.js';
import type { TeamSecrets } from './team-secrets.js';

/** E2B's secrets API (the SDK's `Secret`, docs/e2b.md "Secrets"): values the egress path puts in. */
export function e2bSecretRoutes(client: SvcClient, boxes: Sandboxes, secrets: TeamSecrets): RouteDef[] {
  const route = e2bRouter(boxes);
  const id = (req: Request) => String(req.params.secretID);
  type Body = { name?: unknown; value?: unknown; metadata?: unknown };
  return [
    route('post', '/secrets', async (req, res) => {
      res.status(201).json(await secrets.create((req.body ?? {}) as Body));
    }),
    route('get', '/secrets', async (req, res) => page(req, res, await secrets.list())),
    route('get', '/secrets/:secretID', async (req, res) => void res.json(await secrets.get(id(req)))),
    route('post', '/secrets/:secretID', async (req, res) => {
      res.json(await secrets.update(id(req), (req.body ?? {}) as Body));
    }),
    route('delete', '/secrets/:secretID', async (req, res) => {
      await secrets.remove(id(req), await client.list());
      res.status(204).end();
    }),
  ];
}
