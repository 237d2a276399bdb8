import type { EgressService } from '../../app/egress-service.js';
import { InvalidArgumentError } from '../../domain/errors.js';
import { parseBool, queryInt, queryOne, type Query } from '../../domain/query.js';
import { writeNdjson } from '../http-kit/ndjson.js';
import type { RouteDef } from '../http-kit/route.js';

/** `since`: milliseconds since the epoch, or an RFC 3339 time. */
function sinceOf(q: Query): number | undefined {
  const v = queryOne(q, 'since');
  if (v === undefined || v === '') return undefined;
  const ms = /^\d+$/.test(v) ? Number(v) : Date.parse(v);
  if (!Number.isFinite(ms))
    throw new InvalidArgumentError('since must be milliseconds since the epoch or an RFC 3339 time');
  return ms;
}

/** A VM's egress policy and log: /vms/{name}/egress (docs/network.md). */
export function egressRoutes(egress: EgressService): RouteDef[] {
  const name = (p: Record<string, unknown>) => String(p.name);
  return [
    { method: 'get', path: '/vms/:name/egress', handler: (req, res) => void res.json(egress.get(name(req.params))) },
    {
      method: 'put',
      path: '/vms/:name/egress',
      body: 'json',
      handler: async (req, res) => void res.json(await egress.put(name(req.params), req.body)),
    },
    {
      method: 'get',
      path: '/vms/:name/egress/secrets',
      handler: (req, res) => void res.json(egress.secrets(name(req.params))),
    },
    {
      method: 'put',
      path: '/vms/:name/egress/secrets',
      body: 'json',
      handler: async (req, res) => void res.json(await egress.putSecrets(name(req.params), req.body)),
    },
    {
      method: 'get',
      path: '/vms/:name/egress/log',
      handler: async (req, res) => {
        const q = req.query as Query;
        const vm = name(req.params);
        const follow = parseBool(q, 'follow', false);
        const limit = queryInt(q, 'limit', 10_000) ?? 100;
        const sinceMs = sinceOf(q);
        if (!follow) return void res.json({ name: vm, events: await egress.log(vm, { limit, sinceMs }) });
        // Following: what was logged, then what happens (listening first, so nothing falls between).
        const ac = new AbortController();
        const live = egress.follow(vm, ac.signal);
        const past = await egress.log(vm, { limit, sinceMs });
        const seen = new Set(past.map((e) => JSON.stringify(e)));
        const last = past.at(-1)?.t ?? '';
        await writeNdjson(
          res,
          (async function* () {
            yield* past;
            for await (const e of live) if (e.t > last || (e.t === last && !seen.has(JSON.stringify(e)))) yield e;
          })(),
          () => ac.abort(),
        ).finally(() => ac.abort());
      },
    },
  ];
}
