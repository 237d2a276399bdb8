import { createReadStream } from 'node:fs';
import { mkdir, stat } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import type { SvcClient } from '../client/svc-client.js';
import { noneOn404 } from '../client/svc-transport.js';
import { progressBar } from './format.js';

export interface Endpoint {
  vm?: string;
  path: string;
}

/**
 * `NAME:/path` is a guest path; `NAME:`, `NAME:file` and `NAME:~/file` are in root's home there, as
 * scp takes them (homeRelative). Anything else (including `./a:b`) is local.
 */
export function parseEndpoint(s: string): Endpoint {
  const m = /^([a-z][a-z0-9-]{0,62}):(.*)$/.exec(s);
  return m ? { vm: m[1], path: m[2] } : { path: s };
}

/** A guest path as scp reads it: absolute as it is, else under `home` (`~` and `~/` included). */
export function homeRelative(path: string, home: string): string {
  if (path.startsWith('/')) return path;
  const rest = path === '~' ? '' : path.startsWith('~/') ? path.slice(2) : path;
  return `${home.replace(/\/$/, '')}/${rest}`;
}

/** The guest's side of a copy: its path made absolute, and with a user whose what is written there is. */
interface GuestSide {
  endpoint: Endpoint;
  owner?: { uid: number; gid: number };
}

/**
 * `user`'s ids and home in the guest (an exec as that user runs in its home), the path made
 * absolute under that home; without a user, root's (an exec only for a relative path).
 */
async function guestSide(client: SvcClient, e: Endpoint, user?: string): Promise<GuestSide> {
  if (user !== undefined) {
    const r = await client.exec(e.vm!, { cmd: 'sh', args: ['-c', 'id -u; id -g; pwd'], user });
    const [uid, gid, home] = r.stdout.trim().split('\n');
    if (r.exit_code !== 0 || !/^\d+$/.test(uid ?? '') || !/^\d+$/.test(gid ?? '') || !home?.startsWith('/'))
      throw new Error(`cp --user ${user}: ${r.error ?? (r.stderr.trim() || 'the guest did not say who that is')}`);
    return { endpoint: { vm: e.vm, path: homeRelative(e.path, home) }, owner: { uid: Number(uid), gid: Number(gid) } };
  }
  if (e.path.startsWith('/')) return { endpoint: e };
  // an agent from before exec's `user` (501) runs as root anyway: root's home is /root there
  const r = await client.exec(e.vm!, { cmd: 'pwd', args: [], user: 'root' }).catch(() => undefined);
  const home = r?.exit_code === 0 && r.stdout.startsWith('/') ? r.stdout.trim() : '/root';
  return { endpoint: { vm: e.vm, path: homeRelative(e.path, home) } };
}

/** Counts bytes going through, drawing a progress bar on a terminal. */
function meter(total: number | undefined, tty: boolean): Transform {
  let done = 0;
  const t0 = Date.now();
  let last = 0;
  return new Transform({
    transform(chunk: Buffer, _e, cb) {
      done += chunk.length;
      if (tty && Date.now() - last > 200) {
        last = Date.now();
        process.stderr.write(`\r${progressBar(done, total, t0)}`);
      }
      cb(null, chunk);
    },
    flush(cb) {
      if (tty) process.stderr.write(`\r${progressBar(done, total, t0)}\n`);
      cb();
    },
  });
}

/** What a copy's destination is now: a directory, something else, or nothing yet. */
export type Found = 'directory' | 'other' | undefined;

/**
 * Where a copy lands, by `cp -r`'s and `docker cp`'s rules: into a destination that is a directory
 * (or that ends with `/`) under the source's own name; a directory source ending in `/.` gives its
 * contents instead, into the destination itself. A destination that does not exist is the copy
 * itself; a directory onto something that is not one is refused.
 */
export function copyTarget(src: { path: string; directory: boolean }, dst: { path: string; found: Found }): string {
  const contents = src.directory && /(^|\/)\.\/?$/.test(src.path);
  if (src.directory && dst.found === 'other') throw new Error(`cp: ${dst.path}: not a directory (the source is one)`);
  const into = dst.found === 'directory' || (!src.directory && dst.path.endsWith('/'));
  if (!into || contents) return dst.path;
  const name = basename(resolve(src.path));
  return name ? join(dst.path, name) : dst.path;
}

/** What a guest path is now, for a copy into it (404: nothing yet). */
async function foundInGuest(client: SvcClient, vm: string, path: string): Promise<Found> {
  return client.stat(vm, path).then((i): Found => (i.type === 'directory' ? 'directory' : 'other'), noneOn404);
}

/** fs-kit's tar-tree, loaded by the copies of a tree: tar-stream was 17 ms of every CLI start. */
const tarTree = () => import('../fs-kit/tar-tree.js');

/** A path without a trailing `/.` (a directory's contents, for copyTarget). */
const bare = (p: string) => p.replace(/\/\.\/?$/, '') || '/';

/**
 * svc cp SRC DST: one side is `NAME:/path`. Directories travel as tar (the agent packs and
 * extracts on its side, fs-kit's tar-tree on ours); files as bytes, written locally with
 * writeFileAtomic. Where it lands: copyTarget. Whose it is, as docker cp has it: in the guest,
 * root's or `user`'s (relative paths in that user's home too); here, this process's user's.
 * `-` as the local side is a tar archive on stdin or stdout, as docker cp takes it (tarStdio).
 */
export async function copy(
  client: SvcClient,
  src: Endpoint,
  dst: Endpoint,
  tty: boolean,
  user?: string,
): Promise<void> {
  if (!!src.vm === !!dst.vm) throw new Error('cp: exactly one of SRC and DST must be NAME:/path');
  const guest = await guestSide(client, src.vm ? src : dst, user);
  if (src.vm) src = guest.endpoint;
  else dst = guest.endpoint;
  // a file the agent writes is its user's (root's) unless given; a tree would keep this host's owners
  const owner = guest.owner;
  if (src.path === '-' || dst.path === '-') return tarStdio(client, src, dst, owner);
  if (dst.vm) {
    const st = await stat(src.path);
    const there = await foundInGuest(client, dst.vm, dst.path);
    const target = copyTarget({ path: src.path, directory: st.isDirectory() }, { path: dst.path, found: there });
    if (st.isDirectory()) {
      const tar = await (await tarTree()).packTree(src.path);
      await client.upload(
        dst.vm,
        { path: target, mode: 'tar', ...(owner ?? { uid: 0, gid: 0 }) },
        tar.pipe(meter(undefined, tty)) as unknown as Readable,
      );
    } else {
      const body = createReadStream(src.path).pipe(meter(st.size, tty));
      await client.upload(
        dst.vm,
        { path: target, permissions: (st.mode & 0o777).toString(8).padStart(4, '0'), ...owner },
        body,
        st.size,
      );
    }
    return;
  }
  const info = await client.stat(src.vm!, bare(src.path));
  const directory = info.type === 'directory';
  const there = await stat(dst.path).then(
    (s): Found => (s.isDirectory() ? 'directory' : 'other'),
    () => undefined,
  );
  const target = copyTarget({ path: src.path, directory }, { path: dst.path, found: there });
  if (directory) {
    const { body } = await client.download(src.vm!, bare(src.path), 'tar');
    await mkdir(target, { recursive: true });
    await (await tarTree()).extractTree(target, body.pipe(meter(undefined, tty)), 'self');
    return;
  }
  await mkdir(dirname(target), { recursive: true });
  const { body, size } = await client.download(src.vm!, src.path, 'binary');
  await writeFileAtomic(target, body.pipe(meter(size, tty)), { mode: parseInt(info.mode, 8) & 0o777 });
}

/**
 * `svc cp - NAME:DIR` extracts a tar archive from stdin into the directory DIR (made when missing),
 * its entries root's or the user's; `svc cp NAME:PATH -` writes one of PATH to stdout: a file as
 * its one entry, a directory under its own name (its contents alone for `DIR/.`), as docker cp.
 */
async function tarStdio(client: SvcClient, src: Endpoint, dst: Endpoint, owner: GuestSide['owner']): Promise<void> {
  if (dst.vm) {
    if ((await foundInGuest(client, dst.vm, dst.path)) === 'other')
      throw new Error(`cp: ${dst.path}: not a directory (a tar archive from stdin is extracted into one)`);
    await client.upload(dst.vm, { path: dst.path, mode: 'tar', ...(owner ?? { uid: 0, gid: 0 }) }, process.stdin);
    return;
  }
  const path = bare(src.path);
  const info = await client.stat(src.vm!, path);
  const { body } = await client.download(src.vm!, path, 'tar');
  const name = basename(path);
  const whole = info.type === 'directory' && name && !/(^|\/)\.\/?$/.test(src.path);
  const mode = parseInt(info.mode, 8) & 0o7777;
  const out = whole ? (await tarTree()).underFolder(body, name, { mode, mtime: new Date(info.mtime) }) : body;
  await pipeline(out, process.stdout);
}
