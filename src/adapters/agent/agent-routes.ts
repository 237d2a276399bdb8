import type { Request } from 'express';
import type { AgentService } from '../../app/agent/agent-service.js';
import type { ExecService } from '../../app/agent/exec-service.js';
import type { FileService } from '../../app/agent/file-service.js';
import { parseBool, requiredPath, type Query } from '../../domain/query.js';
import { downloadHandler, execHandler, uploadHandler } from '../http-kit/guest-handlers.js';
import type { RouteDef } from '../http-kit/route.js';

/** The agent's HTTP API (docs/agent.md); exec and cp share their handlers with the daemon's proxy. */
export function agentRoutes(agent: AgentService, exec: ExecService, files: FileService): RouteDef[] {
  const q = (req: Request) => req.query as Query;
  return [
    { method: 'get', path: '/health', handler: async (_req, res) => void res.json(await agent.health()) },
    { method: 'get', path: '/readiness', handler: async (_req, res) => void res.json(await agent.readiness()) },
    { method: 'get', path: '/stats', handler: async (_req, res) => void res.json(await agent.stats()) },
    {
      method: 'post',
      path: '/exec',
      body: 'raw',
      handler: execHandler({
        buffered: (_req, er, stdin, gone) => exec.buffered(er, stdin, gone),
        stream: (_req, er, stdin, gone) => exec.stream(er, stdin, gone),
      }),
    },
    { method: 'put', path: '/cp', handler: uploadHandler((_req, o, body) => files.put(o, body)) },
    { method: 'get', path: '/cp', handler: downloadHandler((_req, path, mode) => files.get(path, mode)) },
    {
      method: 'get',
      path: '/fs/readdir',
      handler: async (req, res) => void res.json(await files.readdir(requiredPath(q(req)))),
    },
    {
      method: 'get',
      path: '/fs/stat',
      handler: async (req, res) => void res.json(await files.stat(requiredPath(q(req)))),
    },
    {
      method: 'post',
      path: '/fs/mkdir',
      handler: async (req, res) => void (await files.mkdir(req.body), res.status(204).end()),
    },
    {
      method: 'post',
      path: '/fs/symlink',
      handler: async (req, res) => void (await files.symlink(req.body), res.status(204).end()),
    },
    {
      method: 'delete',
      path: '/fs/remove',
      handler: async (req, res) =>
        void (await files.remove(requiredPath(q(req)), parseBool(q(req), 'recursive', false)), res.status(204).end()),
    },
    {
      method: 'post',
      path: '/identity',
      handler: async (req, res) => void (await agent.setIdentity(req.body), res.status(204).end()),
    },
    {
      method: 'put',
      path: '/egress',
      body: 'json',
      handler: async (req, res) => void (await agent.setEgress(req.body), res.status(204).end()),
    },
    {
      method: 'post',
      path: '/secrets/materialize',
      handler: async (req, res) => void res.json(await agent.materialize(req.body)),
    },
  ];
}
