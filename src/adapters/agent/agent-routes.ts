import type { Request } from 'express';
import type { AgentService } from '../../app/agent/agent-service.js';
import type { ExecService } from '../../app/agent/exec-service.js';
import type { FileService } from '../../app/agent/file-service.js';
import { parseBool, parseCopyMode, parseExecQuery, requiredPath, optUint, queryOne } from '../../domain/exec-query.js';
import { writeNdjson } from '../http-kit/ndjson.js';
import { hasBody, sendStream, type RouteDef } from '../http-kit/route.js';


export function agentRoutes(agent: AgentService, exec: ExecService, files: FileService): RouteDef[] {
  const q = (req: Request) => req.query as Record<string, unknown>;
  return [
    { method: 'get', path: '/health', handler: async (_req, res) => void res.json(await agent.health()) },
    { method: 'get', path: '/readiness', handler: async (_req, res) => void res.json(await agent.readiness()) },
    { method: 'get', path: '/stats', handler: async (_req, res) => void res.json(await agent.stats()) },
    {
      method: 'post', path: '/exec', body: 'raw',
      handler: async (req, res) => {
        const { buffered, ...er } = parseExecQuery(q(req));
        const stdin = hasBody(req) ? req : undefined;
        if (buffered) return void res.json(await exec.buffered(er, stdin));
        const frames = exec.stream(er, stdin);
        await writeNdjson(res, frames, () => frames.cancel());
      },
    },
    {
      method: 'put', path: '/cp',
      handler: async (req, res) => {
        await files.put({
          path: requiredPath(q(req)), mode: parseCopyMode(q(req)), permissions: queryOne(q(req), 'permissions'),
          uid: optUint(q(req), 'uid'), gid: optUint(q(req), 'gid'),
        }, req);
        res.status(204).end();
      },
    },
    {
      method: 'get', path: '/cp',
      handler: async (req, res) => {
        sendStream(res, await files.get(requiredPath(q(req)), parseCopyMode(q(req))));
      },
    },
    { method: 'get', path: '/fs/readdir', handler: async (req, res) => void res.json(await files.readdir(requiredPath(q(req)))) },
    { method: 'get', path: '/fs/stat', handler: async (req, res) => void res.json(await files.stat(requiredPath(q(req)))) },
    { method: 'post', path: '/fs/mkdir', handler: async (req, res) => void (await files.mkdir(req.body), res.status(204).end()) },
    { method: 'post', path: '/fs/symlink', handler: async (req, res) => void (await files.symlink(req.body), res.status(204).end()) },
    {
      method: 'delete', path: '/fs/remove',
      handler: async (req, res) => void (await files.remove(requiredPath(q(req)), parseBool(q(req), 'recursive', false)), res.status(204).end()),
    },
    { method: 'post', path: '/identity', handler: async (req, res) => void (await agent.setIdentity(req.body), res.status(204).end()) },
    { method: 'post', path: '/secrets/materialize', handler: async (req, res) => void res.json(await agent.materialize(req.body)) },
  ];
}
