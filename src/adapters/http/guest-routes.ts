import type { AgentDeployService } from '../../app/agent-deploy-service.js';
import type { ForwardService } from '../../app/forward-service.js';
import type { GuestProxy } from '../../app/guest-proxy.js';
import type { MetricsSampler } from '../../app/metrics-sampler.js';
import type { Vms } from '../../app/vms.js';
import type { SecretService } from '../../app/secret-service.js';
import type { ConsoleLogs } from '../../ports/stores.js';
import { parseBool, parseCopyMode, parseExecQuery, requiredPath, optUint, queryOne } from '../../domain/exec-query.js';
import { InvalidArgumentError } from '../../domain/errors.js';
import { writeNdjson } from '../http-kit/ndjson.js';
import { hasBody, sendStream, type RouteDef } from '../http-kit/route.js';
import { optionalInt } from './system-routes.js';

export interface GuestRouteDeps {
  guest: GuestProxy;
  logs: ConsoleLogs;
  vms: Vms;
  forwards: ForwardService;
  secrets: SecretService;
  sampler: MetricsSampler;
  deploy: AgentDeployService;
}

/** Agent proxy, live forwards, secret injection, stats history and deploy: /vms/{name}/... */
export function guestRoutes(d: GuestRouteDeps): RouteDef[] {
  const name = (p: Record<string, unknown>) => String(p.name);
  const q = (r: { query: unknown }) => r.query as Record<string, unknown>;
  return [
    { method: 'get', path: '/vms/:name/agent/health', handler: async (req, res) => void res.json(await d.guest.health(name(req.params))) },
    { method: 'post', path: '/vms/:name/agent/deploy', handler: async (req, res) => void res.json(await d.deploy.deploy(name(req.params))) },
    { method: 'get', path: '/vms/:name/stats', handler: async (req, res) => void res.json(await d.guest.stats(name(req.params))) },
    {
      method: 'post', path: '/vms/:name/exec', body: 'raw',
      handler: async (req, res) => {
        const { buffered, ...er } = parseExecQuery(q(req));
        const stdin = hasBody(req) ? req : undefined;
        if (buffered) return void res.json(await d.guest.exec(name(req.params), er, stdin));
        const frames = d.guest.execStream(name(req.params), er, stdin);
        // Open the stream before answering, so a 503/404 is still a status, not a broken stream.
        const it = frames[Symbol.asyncIterator]();
        const first = await it.next();
        await writeNdjson(res, (async function* () {
          if (!first.done) yield first.value;
          for (let n = await it.next(); !n.done; n = await it.next()) yield n.value;
        })(), () => void it.return?.());
      },
    },
    {
      method: 'put', path: '/vms/:name/cp',
      handler: async (req, res) => {
        await d.guest.upload(name(req.params), {
          path: requiredPath(q(req)), mode: parseCopyMode(q(req)), permissions: queryOne(q(req), 'permissions'),
          uid: optUint(q(req), 'uid'), gid: optUint(q(req), 'gid'),
        }, req);
        res.status(204).end();
      },
    },
    {
      method: 'get', path: '/vms/:name/cp',
      handler: async (req, res) => {
        sendStream(res, await d.guest.download(name(req.params), requiredPath(q(req)), parseCopyMode(q(req))));
      },
    },
    { method: 'get', path: '/vms/:name/fs/readdir', handler: async (req, res) => void res.json(await d.guest.fs(name(req.params), { op: 'readdir', path: requiredPath(q(req)) })) },
    { method: 'get', path: '/vms/:name/fs/stat', handler: async (req, res) => void res.json(await d.guest.fs(name(req.params), { op: 'stat', path: requiredPath(q(req)) })) },
    {
      method: 'post', path: '/vms/:name/fs/mkdir',
      handler: async (req, res) => {
        const b = (req.body ?? {}) as { path?: unknown; recursive?: unknown; mode?: unknown };
        if (typeof b.path !== 'string') throw new InvalidArgumentError('path is required');
        if (b.recursive !== undefined && typeof b.recursive !== 'boolean') throw new InvalidArgumentError('recursive must be a boolean');
        if (b.mode !== undefined && typeof b.mode !== 'string') throw new InvalidArgumentError('mode must be an octal string');
        await d.guest.fs(name(req.params), { op: 'mkdir', path: b.path, recursive: b.recursive as boolean | undefined, mode: b.mode as string | undefined });
        res.status(204).end();
      },
    },
    {
      method: 'post', path: '/vms/:name/fs/symlink',
      handler: async (req, res) => {
        const b = (req.body ?? {}) as { path?: unknown; target?: unknown };
        if (typeof b.path !== 'string' || typeof b.target !== 'string') throw new InvalidArgumentError('path and target are required');
        await d.guest.fs(name(req.params), { op: 'symlink', path: b.path, target: b.target });
        res.status(204).end();
      },
    },
    {
      method: 'delete', path: '/vms/:name/fs/remove',
      handler: async (req, res) => {
        await d.guest.fs(name(req.params), { op: 'remove', path: requiredPath(q(req)), recursive: parseBool(q(req), 'recursive', false) });
        res.status(204).end();
      },
    },
    { method: 'post', path: '/vms/:name/forwards', handler: async (req, res) => void res.status(201).json(await d.forwards.add(name(req.params), req.body)) },
    {
      method: 'delete', path: '/vms/:name/forwards/:hostPort',
      handler: async (req, res) => void res.json(await d.forwards.remove(name(req.params), String(req.params.hostPort))),
    },
    {
      method: 'post', path: '/vms/:name/secrets/:secretName',
      handler: async (req, res) => void res.json(await d.secrets.inject(name(req.params), String(req.params.secretName), req.body)),
    },
    {
      method: 'get', path: '/vms/:name/metrics',
      handler: async (req, res) => {
        const since = optionalInt(queryOne(q(req), 'since'), 'since', Number.MAX_SAFE_INTEGER);
        const limit = optionalInt(queryOne(q(req), 'limit'), 'limit', 1_000_000);
        const { interval_ms: _i, ...out } = await d.sampler.read(name(req.params), { since, limit });
        res.json(out);
      },
    },
    {
      method: 'get', path: '/vms/:name/logs',
      handler: async (req, res) => {
        d.vms.get(name(req.params));
        const tail = optionalInt(queryOne(q(req), 'tail'), 'tail', 64 * 1024 * 1024);
        const follow = parseBool(q(req), 'follow', false);
        const ac = new AbortController();
        res.on('close', () => ac.abort());
        res.status(200).type('text/plain; charset=utf-8');
        res.setHeader('Cache-Control', 'no-store');
        res.flushHeaders();
        for await (const chunk of d.logs.read(name(req.params), { tail, follow, signal: ac.signal })) {
          if (!res.write(chunk)) await new Promise((r) => { res.once('drain', r); res.once('close', r); });
          if (ac.signal.aborted) break;
        }
        res.end();
      },
    },
    {
      // The shell is a WebSocket (see shell-proxy.ts); a plain GET gets told so.
      method: 'get', path: '/vms/:name/shell',
      handler: (_req, res) => void res.status(426).setHeader('Upgrade', 'websocket').json({ error: 'GET /vms/{name}/shell needs a WebSocket upgrade', code: 'invalid_argument' }),
    },
  ];
}
