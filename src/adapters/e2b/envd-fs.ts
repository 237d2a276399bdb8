import { posix } from 'node:path';
import type { Request } from 'express';
import type { FsInfo } from '../../domain/agent.js';
import { InvalidArgumentError } from '../../domain/errors.js';
import type { SvcClient } from '../client/svc-client.js';
import { RpcError, type RpcService } from './connect-rpc.js';
import { abs, keepaliveMs, nextOrTick } from './envd-common.js';

/** The temporary file the agent writes a file as before it renames it into place (fs-kit/atomic-file.ts). */
const AGENT_TMP = /(^|\/)\.[^/]+\.[0-9a-f]{12}\.tmp$/;

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

/** envd's `filesystem.Filesystem` service on svc's fs calls and its resumable watch (docs/e2b.md). */
export function filesystemService(client: SvcClient, vmOf: (req: Request) => Promise<string>): RpcService {
  return {
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
        if (r.exit_code !== 0) throw new RpcError('failed_precondition', r.stderr.trim() || `mv exited ${r.exit_code}`);
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
            } else if (e.type !== 'overflow' && e.type !== 'reverted') {
              yield { filesystem: { name: rel(e.path), type: `EVENT_TYPE_${e.type.toUpperCase()}` } };
            }
          }
        } finally {
          await it.return?.();
          if (watch) await client.removeWatch(vm, watch).catch(() => undefined);
        }
      },
    },
  };
}
