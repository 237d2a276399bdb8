import { posix } from 'node:path';
import { Readable } from 'node:stream';
import busboy from 'busboy';
import type { Request, Response } from 'express';
import { InvalidArgumentError } from '../../domain/errors.js';
import type { FsInfo } from '../../domain/agent.js';
import type { Instance } from '../../domain/vm.js';
import type { OutputFrame, ProcessInfo, ProcessStream } from '../../domain/processes.js';
import type { RouteDef } from '../http-kit/route.js';
import { drainBody } from '../http-kit/http-app.js';
import { SvcError, type SvcClient } from '../client/svc-client.js';
import { connectRoutes, RpcError, type RpcCall } from './connect-rpc.js';
import { E2B_HOME, guestUser, metaOf, type Sandboxes } from './sandboxes.js';

/**
 * E2B's in-sandbox API (envd) under `/e2b/envd`, the URL E2B_SANDBOX_URL names: `/health`,
 * `/files`, and the Connect services `process.Process` and `filesystem.Filesystem`, each call
 * naming its sandbox in `E2b-Sandbox-Id`. Commands are svc's durable processes (an E2B pid is the
 * process's pid in the guest); files are svc's cp and fs calls (docs/e2b.md).
 */

/** Where E2B's relative paths start: its default user's home (sandboxes.ts). */
const abs = (p: unknown): string => {
  if (typeof p !== 'string' || !p) throw new InvalidArgumentError('path is required');
  return posix.resolve(E2B_HOME, p);
};
/** E2B's `Authorization: Basic base64(user:)`, as the guest's user (sandboxes.ts, guestUser). */
function userOf(req: Request): string | undefined {
  const m = /^Basic (.+)$/.exec(req.headers.authorization ?? '');
  return guestUser(m ? Buffer.from(m[1], 'base64').toString('utf8').split(':')[0] : '');
}
/** The temporary file the agent writes a file as before it renames it into place (fs-kit/atomic-file.ts). */
const AGENT_TMP = /(^|\/)\.[^/]+\.[0-9a-f]{12}\.tmp$/;

/** How often a stream says it is alive: E2B's `Keepalive-Ping-Interval` (seconds), 50 by default. */
function keepaliveMs(req: Request): number {
  const s = Number(req.headers['keepalive-ping-interval'] ?? 50);
  return Number.isFinite(s) && s >= 1 ? Math.min(s, 300) * 1000 : 50_000;
}

const FILE_TYPE: Record<FsInfo['type'], string> = {
  file: 'FILE_TYPE_FILE',
  directory: 'FILE_TYPE_DIRECTORY',
  symlink: 'FILE_TYPE_SYMLINK',
  other: 'FILE_TYPE_UNSPECIFIED',
};

function entryInfo(f: FsInfo): Record<string, unknown> {
  const mode = parseInt(f.mode, 8) || 0;
  return {
    name: f.name,
    type: FILE_TYPE[f.type] ?? 'FILE_TYPE_UNSPECIFIED',
    path: f.path,
    size: String(f.size),
    mode,
    permissions: permissions(mode, f.type),
    owner: '',
    group: '',
    modifiedTime: f.mtime,
    ...(f.target ? { symlinkTarget: f.target } : {}),
  };
}

function permissions(mode: number, type: FsInfo['type']): string {
  const t = type === 'directory' ? 'd' : type === 'symlink' ? 'l' : '-';
  let s = t;
  for (let i = 8; i >= 0; i--) s += mode & (1 << i) ? 'rwx'[(8 - i) % 3] : '-';
  return s;
}

/** A wait that gives way to a keepalive: resolves with the next item, or `undefined` after `ms`. */
async function nextOrTick<T>(it: AsyncIterator<T>, pending: { p?: Promise<IteratorResult<T>> }, ms: number) {
  pending.p ??= it.next();
  let timer: NodeJS.Timeout | undefined;
  const tick = new Promise<'tick'>((r) => (timer = setTimeout(() => r('tick'), ms)));
  const r = await Promise.race([pending.p, tick]);
  clearTimeout(timer);
  if (r === 'tick') return 'tick' as const;
  pending.p = undefined;
  return r;
}

export function e2bEnvdRoutes(client: SvcClient, boxes: Sandboxes): RouteDef[] {
  const base = '/e2b/envd';
  /** The sandbox of an envd call, which must be running: one created with `lifecycle.autoResume` is woken. */
  const running = async (id: string): Promise<Instance> => {
    const vm = await boxes.forCall(await boxes.get(id));
    if (vm.status !== 'running') throw new RpcError('unavailable', `sandbox ${id} is ${vm.status}`);
    return vm;
  };
  const runningVm = async (req: Request): Promise<Instance> => running(await boxes.sandboxOf(req));
  const vmOf = async (req: Request): Promise<string> => (await runningVm(req)).name;

  /** The svc process an E2B selector names: `{pid}` (the guest's pid of a running one) or `{tag}`. */
  const findProcess = async (vm: string, selector: unknown): Promise<ProcessInfo> => {
    const s = (selector ?? {}) as { pid?: unknown; tag?: unknown };
    const list = await client.processes(vm);
    const found =
      s.pid !== undefined
        ? (list.find((p) => p.pid === Number(s.pid) && p.state === 'running') ??
          list.findLast((p) => p.pid === Number(s.pid)))
        : typeof s.tag === 'string'
          ? list.find((p) => p.tag === s.tag && p.state === 'running')
          : undefined;
    if (!found) throw new RpcError('not_found', `process ${JSON.stringify(s.pid ?? s.tag)} not found`);
    return found;
  };

  /** A process's events as E2B's: start, data (bytes in base64), end; keepalives between. */
  async function* events(vm: string, p: ProcessInfo, call: RpcCall): AsyncIterable<unknown> {
    yield { event: { start: { pid: p.pid } } };
    const it = client.processOutput(vm, p.id, { signal: call.signal })[Symbol.asyncIterator]();
    const pending: { p?: Promise<IteratorResult<OutputFrame>> } = {};
    const every = keepaliveMs(call.req);
    try {
      for (;;) {
        const r = await nextOrTick(it, pending, every);
        if (r === 'tick') {
          yield { event: { keepalive: {} } };
          continue;
        }
        if (r.done) return;
        const f = r.value;
        if ('stream' in f) {
          const b64 = f.encoding === 'base64' ? f.data : Buffer.from(f.data).toString('base64');
          yield { event: { data: { [f.stream as ProcessStream]: b64 } } };
        } else if ('reason' in f) {
          const code = f.exit_code ?? (f.reason === 'exit' ? 0 : -1);
          const status = f.signal ? `signal: ${f.signal.replace(/^SIG/, '').toLowerCase()}` : `exit status ${code}`;
          yield {
            event: {
              end: {
                exitCode: code,
                exited: f.reason === 'exit',
                status,
                ...(f.reason === 'reboot' || f.reason === 'lost'
                  ? { error: `the process was ${f.reason === 'reboot' ? 'ended by a reboot' : 'lost'}` }
                  : {}),
              },
            },
          };
          return;
        }
      }
    } finally {
      await it.return?.();
    }
  }

  const rpc = connectRoutes(
    base,
    {
      'process.Process': {
        stream: {
          Start: async function* (msg, call) {
            const sandbox = await runningVm(call.req);
            const vm = sandbox.name;
            const cfg = (msg.process ?? {}) as { cmd?: unknown; args?: unknown; envs?: unknown; cwd?: unknown };
            if (typeof cfg.cmd !== 'string' || !cfg.cmd) throw new InvalidArgumentError('process.cmd is required');
            const pty = msg.pty as { size?: { cols?: number; rows?: number } } | undefined;
            const p = await client.startProcess(vm, {
              cmd: await commandIn(vm, cfg.cmd),
              args: Array.isArray(cfg.args) ? cfg.args.map(String) : [],
              env: { ...metaOf(sandbox).envs, ...((cfg.envs ?? {}) as Record<string, string>) },
              // E2B starts a command in its user's home: another user's is the agent's default.
              cwd:
                typeof cfg.cwd === 'string' && cfg.cwd
                  ? abs(cfg.cwd)
                  : (metaOf(sandbox).workdir ?? (userOf(call.req) ? undefined : await homeIn(vm))),
              user: userOf(call.req),
              tag: typeof msg.tag === 'string' && msg.tag ? msg.tag : undefined,
              pty: pty ? { cols: pty.size?.cols ?? 80, rows: pty.size?.rows ?? 24 } : undefined,
              stdin: msg.stdin === true || !!pty,
            });
            yield* events(vm, p, call);
          },
          Connect: async function* (msg, call) {
            const vm = await vmOf(call.req);
            const p = await findProcess(vm, (msg.process as { selector?: unknown })?.selector ?? msg.process);
            yield* events(vm, p, call);
          },
        },
        unary: {
          List: async (_msg, call) => {
            const vm = await vmOf(call.req);
            const running = (await client.processes(vm)).filter((p) => p.state === 'running');
            return {
              processes: running.map((p) => ({
                pid: p.pid,
                ...(p.tag ? { tag: p.tag } : {}),
                config: { cmd: p.cmd, args: p.args, envs: {} },
              })),
            };
          },
          SendInput: async (msg, call) => {
            const vm = await vmOf(call.req);
            const p = await findProcess(vm, selectorOf(msg));
            const input = (msg.input ?? {}) as { stdin?: string; pty?: string };
            const data = Buffer.from(input.stdin ?? input.pty ?? '', 'base64');
            await client.sendStdin(vm, p.id, data);
            return {};
          },
          CloseStdin: async (msg, call) => {
            const vm = await vmOf(call.req);
            const p = await findProcess(vm, selectorOf(msg));
            await client.sendStdin(vm, p.id, Buffer.alloc(0), { eof: true });
            return {};
          },
          SendSignal: async (msg, call) => {
            const vm = await vmOf(call.req);
            const p = await findProcess(vm, selectorOf(msg));
            if (p.state !== 'running') throw new RpcError('not_found', `process ${p.pid} has ended`);
            const sig = msg.signal === 'SIGNAL_SIGTERM' || msg.signal === 15 ? 'SIGTERM' : 'SIGKILL';
            await client.signalProcess(vm, p.id, sig);
            return {};
          },
          Update: async (msg, call) => {
            const vm = await vmOf(call.req);
            const p = await findProcess(vm, selectorOf(msg));
            const size = (msg.pty as { size?: { cols?: number; rows?: number } } | undefined)?.size;
            if (size) await client.resizeProcess(vm, p.id, size.cols ?? 80, size.rows ?? 24);
            return {};
          },
        },
      },
      'filesystem.Filesystem': {
        unary: {
          Stat: async (msg, call) => ({ entry: entryInfo(await client.stat(await vmOf(call.req), abs(msg.path))) }),
          MakeDir: async (msg, call) => {
            const vm = await vmOf(call.req);
            const path = abs(msg.path);
            const there = await client.stat(vm, path).catch(() => undefined);
            if (there) throw new RpcError('already_exists', `${path} already exists`);
            await client.mkdir(vm, path, { recursive: true });
            return { entry: entryInfo(await client.stat(vm, path)) };
          },
          Move: async (msg, call) => {
            const vm = await vmOf(call.req);
            const [from, to] = [abs(msg.source), abs(msg.destination)];
            await client.stat(vm, from);
            const r = await client.exec(vm, { cmd: 'mv', args: ['-f', '--', from, to] });
            if (r.exit_code !== 0)
              throw new RpcError('failed_precondition', r.stderr.trim() || `mv exited ${r.exit_code}`);
            return { entry: entryInfo(await client.stat(vm, to)) };
          },
          ListDir: async (msg, call) => {
            const vm = await vmOf(call.req);
            const depth = msg.depth === undefined ? 1 : Number(msg.depth);
            if (!Number.isInteger(depth) || depth < 1 || depth > 32)
              throw new InvalidArgumentError('depth must be 1 to 32');
            const entries: Record<string, unknown>[] = [];
            const walk = async (dir: string, level: number): Promise<void> => {
              for (const f of await client.readdir(vm, dir)) {
                entries.push(entryInfo(f));
                if (f.type === 'directory' && level < depth && entries.length < 100_000) await walk(f.path, level + 1);
              }
            };
            const root = abs(msg.path);
            const st = await client.stat(vm, root);
            if (st.type !== 'directory') throw new InvalidArgumentError(`${root} is not a directory`);
            await walk(root, 1);
            return { entries };
          },
          Remove: async (msg, call) => {
            const vm = await vmOf(call.req);
            const path = abs(msg.path);
            if (path === '/') throw new InvalidArgumentError('will not remove /');
            await client.stat(vm, path);
            await client.remove(vm, path, { recursive: true });
            return {};
          },
        },
        stream: {
          WatchDir: async function* (msg, call) {
            const vm = await vmOf(call.req);
            const root = abs(msg.path);
            const st = await client.stat(vm, root);
            if (st.type !== 'directory') throw new InvalidArgumentError(`${root} is not a directory`);
            const it = client
              .watch(vm, { path: root, recursive: msg.recursive === true }, { signal: call.signal })
              [Symbol.asyncIterator]();
            const pending: { p?: Promise<IteratorResult<Awaited<ReturnType<typeof it.next>>['value']>> } = {};
            const every = keepaliveMs(call.req);
            const rel = (p?: string) => (p ? posix.relative(root, p) : '');
            let watch: string | undefined;
            try {
              for (;;) {
                const r = await nextOrTick(it, pending, every);
                if (r === 'tick') {
                  yield { keepalive: {} };
                  continue;
                }
                if (r.done) return;
                const e = r.value;
                if (e.type === 'watching') {
                  watch = e.watch;
                  yield { start: {} };
                } else if (e.type === 'rename' && e.to && AGENT_TMP.test(e.path ?? '')) {
                  // the agent's own write (a file put in place whole): what envd says of a write
                  yield { filesystem: { name: rel(e.to), type: 'EVENT_TYPE_CREATE' } };
                  yield { filesystem: { name: rel(e.to), type: 'EVENT_TYPE_WRITE' } };
                } else if (AGENT_TMP.test(e.path ?? '')) {
                  continue;
                } else if (e.type === 'rename') {
                  yield { filesystem: { name: rel(e.path), type: 'EVENT_TYPE_RENAME' } };
                  if (e.to) yield { filesystem: { name: rel(e.to), type: 'EVENT_TYPE_CREATE' } };
                } else if (e.type !== 'overflow') {
                  yield { filesystem: { name: rel(e.path), type: `EVENT_TYPE_${e.type.toUpperCase()}` } };
                }
              }
            } finally {
              await it.return?.();
              if (watch) await client.removeWatch(vm, watch).catch(() => undefined);
            }
          },
        },
      },
    },
    async (req) => void (await boxes.sandboxOf(req)),
  );

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
    res.status(200).setHeader('Content-Type', 'application/octet-stream');
    res.setHeader('X-Content-Type-Options', 'nosniff');
    if (d.size !== undefined) res.setHeader('Content-Length', String(d.size));
    d.body.pipe(res);
    await new Promise((r) => res.once('close', r));
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

function selectorOf(msg: Record<string, unknown>): unknown {
  const p = msg.process as { selector?: unknown; pid?: unknown; tag?: unknown } | undefined;
  return p?.selector ?? p;
}
