import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import { finished } from 'node:stream/promises';
import busboy from 'busboy';
import type { Request, Response } from 'express';
import { InvalidArgumentError } from '../../domain/errors.js';
import type { FsInfo } from '../../domain/agent.js';
import type { Instance } from '../../domain/vm.js';
import { sendStream, type RouteDef } from '../http-kit/route.js';
import { drainBody } from '../http-kit/http-app.js';
import { SvcError, type SvcClient } from '../client/svc-client.js';
import { connectRoutes, RpcError } from './connect-rpc.js';
import { abs, ENVD_BASE, type EnvdCalls } from './envd-common.js';
import { filesystemService } from './envd-fs.js';
import { processService } from './envd-process.js';
import { E2B_HOME, type Sandboxes } from './sandboxes.js';

/**
 * E2B's in-sandbox API (envd) under `/e2b/envd`, the URL E2B_SANDBOX_URL names: `/health`,
 * `/files`, and the Connect services `process.Process` and `filesystem.Filesystem`, each call
 * naming its sandbox in `E2b-Sandbox-Id`. Commands are svc's durable processes (an E2B pid is the
 * process's pid in the guest); files are svc's cp and fs calls (docs/e2b.md).
 */

export function e2bEnvdRoutes(client: SvcClient, boxes: Sandboxes): RouteDef[] {
  const base = ENVD_BASE;
  /** The sandbox of an envd call, which must be running: one created with `lifecycle.autoResume` is woken. */
  const running = async (id: string): Promise<Instance> => {
    const vm = await boxes.forCall(await boxes.get(id));
    if (vm.status !== 'running') throw new RpcError('unavailable', `sandbox ${id} is ${vm.status}`);
    return vm;
  };
  const runningVm = async (req: Request): Promise<Instance> => running(await boxes.sandboxOf(req));
  const vmOf = async (req: Request): Promise<string> => (await runningVm(req)).name;
  const calls: EnvdCalls = { runningVm, vmOf };

  /** What a path of the guest is (undefined: nothing there), asked once per VM and path. */
  const kinds = new Map<string, FsInfo['type'] | undefined>();
  async function kindIn(vm: string, path: string): Promise<FsInfo['type'] | undefined> {
    const key = `${vm}\0${path}`;
    if (!kinds.has(key)) kinds.set(key, (await client.stat(vm, path).catch(() => undefined))?.type);
    return kinds.get(key);
  }

  /** Root's home, where E2B's default user's commands start; undefined in a guest without one (`/`). */
  const homeIn = async (vm: string) => ((await kindIn(vm, E2B_HOME)) === 'directory' ? E2B_HOME : undefined);

  /** E2B runs every command as `/bin/bash -l -c CMD`; a guest without bash (minimal) gets its `sh`. */
  const commandIn = async (vm: string, cmd: string) =>
    cmd !== '/bin/bash' ? cmd : (await kindIn(vm, '/bin/bash')) ? '/bin/bash' : '/bin/sh';

  const rpc = connectRoutes(
    base,
    {
      'process.Process': processService(client, calls, { commandIn, homeIn }),
      'filesystem.Filesystem': filesystemService(client, vmOf),
    },
    async (req) => void (await boxes.sandboxOf(req)),
  );

  /** The running sandbox a signed file URL is for (E2B's uploadUrl/downloadUrl, served at /files). */
  const signedVm = (operation: 'read' | 'write') => async (req: Request) =>
    (await running(await boxes.signedSandbox(req, operation))).name;

  /** A handler of the files API: errors as envd's `{code, message}` with the status. */
  const files =
    (
      fn: (req: Request, res: Response, vm: string) => Promise<void>,
      sandbox: (req: Request) => Promise<string> = vmOf,
    ) =>
    async (req: Request, res: Response): Promise<void> => {
      try {
        await fn(req, res, await sandbox(req));
      } catch (err) {
        const status =
          err instanceof SvcError
            ? err.status || 503
            : err instanceof RpcError
              ? ({ not_found: 404, unavailable: 502, unauthenticated: 401 }[err.code as string] ?? 400)
              : (err as { code?: string }).code === 'not_found'
                ? 404
                : (err as { code?: string }).code === 'unauthenticated'
                  ? 401
                  : 400;
        drainBody(req);
        if (!res.headersSent) res.status(status).json({ code: status, message: (err as Error).message });
        else res.destroy();
      }
    };

  /** GET /files: one file's bytes. */
  const download = async (req: Request, res: Response, vm: string): Promise<void> => {
    const path = abs((req.query as Record<string, unknown>).path);
    const st = await client.stat(vm, path);
    if (st.type === 'directory') throw new InvalidArgumentError(`${path} is a directory`);
    const d = await client.download(vm, path);
    sendStream(res, { name: posix.basename(path), tar: false, size: d.size, body: d.body });
    await finished(res).catch(() => undefined);
  };

  /** POST /files: files from the body (raw, or multipart with paths as file names). */
  const upload = async (req: Request, res: Response, vm: string): Promise<void> => {
    const q = req.query as Record<string, unknown>;
    const written: Record<string, unknown>[] = [];
    const put = async (path: string, body: Readable) => {
      await client.mkdir(vm, posix.dirname(path), { recursive: true });
      await client.upload(vm, { path }, body);
      written.push({ name: posix.basename(path), type: 'file', path });
    };
    const type = String(req.headers['content-type'] ?? '');
    if (type.startsWith('multipart/form-data')) {
      await new Promise<void>((resolve, reject) => {
        const work: Promise<void>[] = [];
        // preservePath: a part's file name is its whole path (busboy keeps only the last part by default)
        const bb = busboy({ headers: req.headers, preservePath: true, limits: { files: 1000, fields: 100 } });
        let failed = false;
        bb.on('file', (_field, stream, info) => {
          if (failed) return void stream.resume();
          // parts come one after another: each goes on to the guest as it arrives
          stream.pause();
          const one = put(abs(q.path ?? info.filename), stream);
          // A part the guest refused (a full disk: 507) is answered at once, and the rest of the
          // body read and dropped: waiting for the body's end would wait for ever, the refused
          // part's bytes no longer read by anyone and the body stopped behind them.
          one.catch((err: unknown) => {
            failed = true;
            stream.resume();
            reject(err);
          });
          work.push(one);
        });
        bb.on('error', reject);
        bb.on('close', () => Promise.all(work).then(() => resolve(), reject));
        req.pipe(bb);
      });
    } else {
      await put(abs(q.path), req);
    }
    if (!written.length) throw new InvalidArgumentError('no file in the request');
    res.status(200).json(written);
  };

  return [
    { method: 'get', path: `${base}/health`, auth: 'none', handler: (_req, res) => void res.status(204).end() },
    {
      method: 'get',
      path: `${base}/files`,
      auth: 'none',
      handler: files(download),
    },
    {
      method: 'post',
      path: `${base}/files`,
      auth: 'none',
      body: 'raw',
      handler: files(upload),
    },
    // A signed URL (uploadUrl, downloadUrl) is `new URL('/files', E2B_SANDBOX_URL)`: the root's
    // /files, with no sandbox named; its signature says which (Sandboxes.signedSandbox).
    { method: 'get', path: '/files', auth: 'none', handler: files(download, signedVm('read')) },
    { method: 'post', path: '/files', auth: 'none', body: 'raw', handler: files(upload, signedVm('write')) },
    ...rpc,
  ];
}
