import type { AgentDeployService } from '../../app/agent-deploy-service.js';
import type { ForwardService } from '../../app/forward-service.js';
import type { GuestProxy } from '../../app/guest-proxy.js';
import type { MetricsSampler } from '../../app/metrics-sampler.js';
import type { Vms } from '../../app/vms.js';
import type { SecretService } from '../../app/secret-service.js';
import type { SshAccess } from '../../app/ssh-access.js';
import type { ConsoleLogs } from '../../ports/stores.js';
import { parseBool, queryInt, requiredPath, type Query } from '../../domain/query.js';
import { InvalidArgumentError } from '../../domain/errors.js';
import { LOG_OFFSET_HEADER } from '../../domain/vm.js';
import { downloadHandler, execHandler, uploadHandler } from '../http-kit/guest-handlers.js';
import { pumpTo } from '../http-kit/ndjson.js';
import type { RouteDef } from '../http-kit/route.js';

export interface GuestRouteDeps {
  guest: GuestProxy;
  logs: ConsoleLogs;
  vms: Vms;
  forwards: ForwardService;
  secrets: SecretService;
  sampler: MetricsSampler;
  deploy: AgentDeployService;
  ssh: SshAccess;
}

/** Agent proxy, live forwards, secret injection, stats history, deploy and SSH access: /vms/{name}/... */
export function guestRoutes(d: GuestRouteDeps): RouteDef[] {
  const name = (p: Record<string, unknown>) => String(p.name);
  const q = (r: { query: unknown }) => r.query as Query;
  return [
    {
      method: 'get',
      path: '/vms/:name/agent/health',
      handler: async (req, res) => void res.json(await d.guest.health(name(req.params))),
    },
    {
      method: 'post',
      path: '/vms/:name/agent/deploy',
      handler: async (req, res) => void res.json(await d.deploy.deploy(name(req.params))),
    },
    {
      method: 'get',
      path: '/vms/:name/stats',
      handler: async (req, res) => void res.json(await d.guest.stats(name(req.params))),
    },
    {
      method: 'post',
      path: '/vms/:name/exec',
      body: 'raw',
      handler: execHandler({
        buffered: (req, er, stdin, gone) => d.guest.exec(name(req.params), er, stdin, gone),
        stream: (req, er, stdin, gone) => d.guest.execStream(name(req.params), er, stdin, gone),
      }),
    },
    {
      method: 'put',
      path: '/vms/:name/cp',
      handler: uploadHandler((req, o, body) => d.guest.upload(name(req.params), o, body)),
    },
    {
      method: 'get',
      path: '/vms/:name/cp',
      handler: downloadHandler((req, path, mode) => d.guest.download(name(req.params), path, mode)),
    },
    {
      method: 'get',
      path: '/vms/:name/fs/readdir',
      handler: async (req, res) =>
        void res.json(await d.guest.fs(name(req.params), { op: 'readdir', path: requiredPath(q(req)) })),
    },
    {
      method: 'get',
      path: '/vms/:name/fs/stat',
      handler: async (req, res) =>
        void res.json(await d.guest.fs(name(req.params), { op: 'stat', path: requiredPath(q(req)) })),
    },
    {
      method: 'post',
      path: '/vms/:name/fs/mkdir',
      handler: async (req, res) => {
        const b = (req.body ?? {}) as { path?: unknown; recursive?: unknown; mode?: unknown };
        if (typeof b.path !== 'string') throw new InvalidArgumentError('path is required');
        if (b.recursive !== undefined && typeof b.recursive !== 'boolean')
          throw new InvalidArgumentError('recursive must be a boolean');
        if (b.mode !== undefined && typeof b.mode !== 'string')
          throw new InvalidArgumentError('mode must be an octal string');
        await d.guest.fs(name(req.params), {
          op: 'mkdir',
          path: b.path,
          recursive: b.recursive as boolean | undefined,
          mode: b.mode as string | undefined,
        });
        res.status(204).end();
      },
    },
    {
      method: 'post',
      path: '/vms/:name/fs/symlink',
      handler: async (req, res) => {
        const b = (req.body ?? {}) as { path?: unknown; target?: unknown };
        if (typeof b.path !== 'string' || typeof b.target !== 'string')
          throw new InvalidArgumentError('path and target are required');
        await d.guest.fs(name(req.params), { op: 'symlink', path: b.path, target: b.target });
        res.status(204).end();
      },
    },
    {
      method: 'delete',
      path: '/vms/:name/fs/remove',
      handler: async (req, res) => {
        await d.guest.fs(name(req.params), {
          op: 'remove',
          path: requiredPath(q(req)),
          recursive: parseBool(q(req), 'recursive', false),
        });
        res.status(204).end();
      },
    },
    {
      method: 'get',
      path: '/vms/:name/ssh',
      handler: async (req, res) => void res.json(await d.ssh.info(name(req.params))),
    },
    {
      method: 'post',
      path: '/vms/:name/ssh/keys',
      handler: async (req, res) => void res.json(await d.ssh.authorize(name(req.params), req.body)),
    },
    {
      method: 'post',
      path: '/vms/:name/forwards',
      handler: async (req, res) => void res.status(201).json(await d.forwards.add(name(req.params), req.body)),
    },
    {
      method: 'delete',
      path: '/vms/:name/forwards/:hostPort',
      handler: async (req, res) =>
        void res.json(await d.forwards.remove(name(req.params), String(req.params.hostPort))),
    },
    {
      method: 'post',
      path: '/vms/:name/secrets/:secretName',
      handler: async (req, res) =>
        void res.json(await d.secrets.inject(name(req.params), String(req.params.secretName), req.body)),
    },
    {
      method: 'get',
      path: '/vms/:name/metrics',
      handler: async (req, res) => {
        const since = queryInt(q(req), 'since', Number.MAX_SAFE_INTEGER);
        const limit = queryInt(q(req), 'limit', 1_000_000);
        const { interval_ms: _i, ...out } = await d.sampler.read(name(req.params), { since, limit });
        res.json(out);
      },
    },
    {
      method: 'get',
      path: '/vms/:name/logs',
      handler: async (req, res) => {
        d.vms.get(name(req.params));
        const tail = queryInt(q(req), 'tail', 64 * 1024 * 1024);
        let from = queryInt(q(req), 'from', Number.MAX_SAFE_INTEGER);
        if (from !== undefined && tail !== undefined) throw new InvalidArgumentError('give from or tail, not both');
        const follow = parseBool(q(req), 'follow', false);
        // where the answer starts, so a reader can come back for what follows it (from=)
        const size = await d.logs.size(name(req.params));
        if (from === undefined) from = tail === undefined ? 0 : Math.max(0, size - tail);
        // a `from` past the end is of a log that was cut since (it is rotated at its cap): this one from its start
        else if (from > size) from = 0;
        const ac = new AbortController();
        res.on('close', () => ac.abort());
        res.status(200).type('text/plain; charset=utf-8');
        res.setHeader('Cache-Control', 'no-store');
        res.setHeader(LOG_OFFSET_HEADER, String(from));
        res.flushHeaders();
        await pumpTo(res, d.logs.read(name(req.params), { from, follow, signal: ac.signal }), () => ac.abort());
      },
    },
    {
      // The shell is a WebSocket (see guest-upgrades.ts); a plain GET gets told so.
      method: 'get',
      path: '/vms/:name/shell',
      handler: (_req, res) =>
        void res
          .status(426)
          .setHeader('Upgrade', 'websocket')
          .json({ error: 'GET /vms/{name}/shell needs a WebSocket upgrade', code: 'invalid_argument' }),
    },
    {
      // A guest port is an upgrade too (guest-upgrades.ts).
      method: 'get',
      path: '/vms/:name/ports/:port',
      handler: (_req, res) =>
        void res.status(426).setHeader('Upgrade', 'tcp').json({
          error: 'GET /vms/{name}/ports/{port} needs Connection: Upgrade and Upgrade: tcp',
          code: 'invalid_argument',
        }),
    },
  ];
}
