import { posix } from 'node:path';
import type { Request, Response } from 'express';
import { InvalidArgumentError } from '../../domain/errors.js';
import type { SvcClient } from '../client/svc-client.js';
import type { ConfinedDir, ConfinedEntry } from '../fs-kit/confined-dir.js';
import { sendStream, type RouteDef } from '../http-kit/route.js';
import { e2bRouter } from './e2b-route.js';
import type { Sandboxes } from './sandboxes.js';
import type { Volumes } from './volumes.js';

/**
 * E2B's volume API (the SDK's `Volume`, docs/e2b.md): volumes made, listed, looked up and deleted
 * with the API key; what they hold read and written with the volume's own token
 * (`/volumecontent/{id}/...`, as E2B's volume API serves it).
 */
export function e2bVolumeRoutes(client: SvcClient, boxes: Sandboxes, volumes: Volumes): RouteDef[] {
  const route = e2bRouter(boxes);
  const id = (req: Request) => String(req.params.volumeID);
  const q = (req: Request) => req.query as Record<string, string | undefined>;
  const path = (req: Request) => {
    const p = q(req).path;
    if (typeof p !== 'string' || !p) throw new InvalidArgumentError('path is required');
    return p;
  };
  /** A content route: the volume's token checked, then `fn` with its folder. */
  const content = (
    m: RouteDef['method'],
    sub: string,
    fn: (req: Request, res: Response, dir: ConfinedDir) => Promise<void>,
    raw = false,
  ) =>
    route(
      m,
      `/volumecontent/:volumeID/${sub}`,
      async (req, res) => fn(req, res, await volumes.authorized(req, id(req))),
      {
        key: false,
        ...(raw ? { raw: true as const } : {}),
      },
    );

  return [
    route('post', '/volumes', async (req, res) => {
      const v = await volumes.create((req.body as { name?: unknown } | undefined)?.name);
      res.status(201).json({ volumeID: v.volumeID, name: v.name, token: v.token });
    }),
    route('get', '/volumes', async (_req, res) => {
      res.json((await volumes.list()).map((v) => ({ volumeID: v.volumeID, name: v.name })));
    }),
    route('get', '/volumes/:volumeID', async (req, res) => {
      const v = await volumes.get(id(req));
      res.json({ volumeID: v.volumeID, name: v.name, token: v.token });
    }),
    route('delete', '/volumes/:volumeID', async (req, res) => {
      await volumes.remove(id(req), await client.list());
      res.status(204).end();
    }),

    content('get', 'dir', async (req, res, dir) => {
      const depth = q(req).depth === undefined ? 1 : Number(q(req).depth);
      if (!Number.isInteger(depth) || depth < 1 || depth > 32)
        throw new InvalidArgumentError('depth must be a whole number from 1 to 32');
      res.json((await dir.list(path(req), depth)).map(entryOf));
    }),
    content('post', 'dir', async (req, res, dir) => {
      const meta = metaOf(q(req));
      await dir.mkdir(path(req), { parents: flag(q(req).force), mode: meta.mode });
      await dir.setMeta(path(req), meta);
      res.status(201).json(entryOf(await dir.stat(path(req))));
    }),
    content('get', 'path', async (req, res, dir) => {
      res.json(entryOf(await dir.stat(path(req))));
    }),
    content('patch', 'path', async (req, res, dir) => {
      await dir.setMeta(path(req), metaOf((req.body ?? {}) as Record<string, unknown>));
      res.json(entryOf(await dir.stat(path(req))));
    }),
    content('delete', 'path', async (req, res, dir) => {
      await dir.remove(path(req));
      res.status(204).end();
    }),
    content('get', 'file', async (req, res, dir) => {
      const { stream, size } = await dir.read(path(req));
      sendStream(res, { name: posix.basename(path(req)), tar: false, size, body: stream });
    }),
    content(
      'put',
      'file',
      async (req, res, dir) => {
        const meta = metaOf(q(req));
        await dir.write(path(req), req, { force: flag(q(req).force), parents: true, mode: meta.mode });
        await dir.setMeta(path(req), meta);
        res.status(201).json(entryOf(await dir.stat(path(req))));
      },
      true,
    ),
  ];
}

/** E2B's VolumeEntryStat. */
function entryOf(e: ConfinedEntry) {
  const type = e.st.isFile()
    ? 'file'
    : e.st.isDirectory()
      ? 'directory'
      : e.st.isSymbolicLink()
        ? 'symlink'
        : 'unknown';
  return {
    name: e.name,
    path: e.path,
    type,
    size: e.st.size,
    mode: e.st.mode & 0o7777,
    uid: e.st.uid,
    gid: e.st.gid,
    atime: e.st.atime.toISOString(),
    mtime: e.st.mtime.toISOString(),
    ctime: e.st.ctime.toISOString(),
    ...(e.target !== undefined ? { target: e.target } : {}),
  };
}

const flag = (v: string | undefined) => v === 'true' || v === '1';

/** uid, gid and mode from a query or a body: whole numbers (a mode's permission bits). */
function metaOf(src: Record<string, unknown>): { uid?: number; gid?: number; mode?: number } {
  const out: { uid?: number; gid?: number; mode?: number } = {};
  for (const [k, max] of [
    ['uid', 0x7fffffff],
    ['gid', 0x7fffffff],
    ['mode', 0o7777],
  ] as const) {
    const v = src[k];
    if (v === undefined || v === null || v === '') continue;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0 || n > max)
      throw new InvalidArgumentError(`${k} must be a whole number from 0 to ${max}`);
    out[k] = n;
  }
  return out;
}
