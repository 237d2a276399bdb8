import { createReadStream, createWriteStream, readlinkSync } from 'node:fs';
import { chmod, chown, lchown, lstat, mkdir, readdir, readFile, readlink, realpath, rename, rm, rmdir, stat, symlink, unlink, utimes } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { basename, dirname, join, posix, relative, resolve } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { injectable } from 'inversify';
import tar from 'tar-stream';
import { formatMode, type FsInfo } from '../../domain/agent.js';
import { AlreadyExistsError, InternalError, InvalidArgumentError, NotFoundError } from '../../domain/errors.js';
import type { GuestFiles, WriteOptions } from '../../ports/guest/guest-files.js';

/** Maps Node fs errors to domain errors with the path in the message. */
function fsError(err: unknown, path: string): Error {
  const e = err as NodeJS.ErrnoException;
  switch (e.code) {
    case 'ENOENT': return new NotFoundError(`${path}: no such file or directory`);
    case 'EEXIST': return new AlreadyExistsError(`${path}: already exists`);
    case 'ENOTEMPTY': return new AlreadyExistsError(`${path}: directory not empty; use recursive=true`);
    case 'ENOTDIR': return new InvalidArgumentError(`${path}: a path component is not a directory`);
    case 'EISDIR': return new InvalidArgumentError(`${path}: is a directory`);
    case 'EACCES': case 'EPERM': return new InvalidArgumentError(`${path}: permission denied`);
    case 'EINVAL': return new InvalidArgumentError(`${path}: invalid argument`);
    default: return new InternalError(`${path}: ${e.message}`);
  }
}

async function info(path: string): Promise<FsInfo> {
  const st = await lstat(path);
  const type = st.isFile() ? 'file' : st.isDirectory() ? 'directory' : st.isSymbolicLink() ? 'symlink' : 'other';
  const out: FsInfo = { name: basename(path) || '/', path, type, size: st.size, mode: formatMode(st.mode), mtime: st.mtime.toISOString() };
  if (type === 'symlink') out.target = await readlink(path);
  return out;
}

function inside(root: string, p: string): boolean {
  const rel = relative(root, p);
  return rel === '' || (!rel.startsWith('..') && !posix.isAbsolute(rel));
}

/** The guest filesystem through node:fs, with tar by tar-stream. Writes are temp + rename. */
@injectable()
export class NodeGuestFiles implements GuestFiles {
  async stat(path: string): Promise<FsInfo> {
    return info(path).catch((e) => { throw fsError(e, path); });
  }

  async readdir(path: string): Promise<FsInfo[]> {
    const names = await readdir(path).catch((e) => { throw fsError(e, path); });
    const out: FsInfo[] = [];
    for (const n of names.sort()) {
      const entry = await info(join(path, n)).catch(() => undefined);
      if (entry) out.push(entry);
    }
    return out;
  }

  async mkdir(path: string, recursive: boolean, mode: number): Promise<void> {
    await mkdir(path, { recursive, mode }).catch((e) => { throw fsError(e, path); });
  }

  async symlink(path: string, target: string): Promise<void> {
    await symlink(target, path).catch((e) => { throw fsError(e, path); });
  }

  async remove(path: string, recursive: boolean): Promise<void> {
    const st = await lstat(path).catch((e) => { throw fsError(e, path); });
    if (st.isDirectory()) {
      if (recursive) await rm(path, { recursive: true, force: true });
      else await rmdir(path).catch((e) => { throw fsError(e, path); });
    } else {
      await unlink(path).catch((e) => { throw fsError(e, path); });
    }
  }

  async writeFile(path: string, body: Readable, opts: WriteOptions): Promise<void> {
    const dir = dirname(path);
    await mkdir(dir, { recursive: true }).catch((e) => { throw fsError(e, dir); });
    const existing = await stat(path).catch(() => undefined);
    if (existing?.isDirectory()) {
      body.resume();
      throw new InvalidArgumentError(`${path}: is a directory; use mode=tar to write into it`);
    }
    const tmp = join(dir, `.${basename(path)}.svc-${randomBytes(6).toString('hex')}`);
    try {
      await pipeline(body, createWriteStream(tmp, { mode: opts.mode, flags: 'wx' }));
      await chmod(tmp, opts.mode);
      if (opts.uid !== undefined || opts.gid !== undefined) await chown(tmp, opts.uid ?? -1, opts.gid ?? -1);
      await rename(tmp, path);
    } catch (err) {
      await unlink(tmp).catch(() => undefined);
      throw fsError(err, path);
    }
  }

  async readFile(path: string): Promise<{ size: number; body: Readable }> {
    const st = await stat(path).catch((e) => { throw fsError(e, path); });
    if (st.isDirectory()) throw new InvalidArgumentError(`${path}: is a directory; use mode=tar`);
    if (!st.isFile()) throw new InvalidArgumentError(`${path}: not a regular file`);
    return { size: st.size, body: createReadStream(path) };
  }

  async extractTar(dir: string, body: Readable): Promise<void> {
    await mkdir(dir, { recursive: true }).catch((e) => { throw fsError(e, dir); });
    const root = await realpath(dir);
    const ex = tar.extract();
    const dirTimes: [string, Date][] = [];
    const check = async (name: string): Promise<string> => {
      const clean = name.replace(/^\.\/+/, '');
      if (clean.startsWith('/') || clean.split('/').includes('..')) {
        throw new InvalidArgumentError(`tar entry ${JSON.stringify(name)} would land outside ${dir}`);
      }
      const target = resolve(root, clean);
      if (!inside(root, target)) throw new InvalidArgumentError(`tar entry ${JSON.stringify(name)} would land outside ${dir}`);
      // A parent created by an earlier entry might be a symlink pointing out: resolve what exists.
      const parent = await realpath(dirname(target)).catch(() => undefined);
      if (parent !== undefined && !inside(root, parent)) {
        throw new InvalidArgumentError(`tar entry ${JSON.stringify(name)} goes through a link out of ${dir}`);
      }
      return target;
    };
    const consume = (async () => {
      for await (const entry of ex) {
        const h = entry.header;
        try {
          const target = await check(h.name);
          const mode = (h.mode ?? 0o644) & 0o7777;
          await mkdir(dirname(target), { recursive: true });
          if (h.type === 'directory') {
            await mkdir(target, { recursive: true, mode });
            await chmod(target, mode);
            if (h.mtime) dirTimes.push([target, h.mtime]);
            entry.resume();
          } else if (h.type === 'file' || h.type === 'contiguous-file') {
            const existing = await lstat(target).catch(() => undefined);
            if (existing?.isSymbolicLink() || existing?.isDirectory()) await rm(target, { recursive: true, force: true });
            await this.writeFile(target, entry as unknown as Readable, { mode });
            if (h.mtime) await utimes(target, h.mtime, h.mtime).catch(() => undefined);
          } else if (h.type === 'symlink') {
            const linkTarget = h.linkname ?? '';
            const resolved = posix.isAbsolute(linkTarget) ? resolve(root, '.' + linkTarget) : resolve(dirname(target), linkTarget);
            if (posix.isAbsolute(linkTarget) || !inside(root, resolved)) {
              throw new InvalidArgumentError(`tar entry ${JSON.stringify(h.name)} is a symlink pointing out of ${dir} (${linkTarget})`);
            }
            await rm(target, { force: true, recursive: true });
            await symlink(linkTarget, target);
            entry.resume();
          } else if (h.type === 'link') {
            throw new InvalidArgumentError(`tar entry ${JSON.stringify(h.name)}: hard links are not supported`);
          } else {
            entry.resume();
          }
          if (process.getuid?.() === 0 && h.type !== 'symlink' && (h.uid !== undefined || h.gid !== undefined)) {
            await lchown(target, h.uid ?? 0, h.gid ?? 0).catch(() => undefined);
          }
        } catch (err) {
          entry.resume();
          throw err;
        }
      }
    })();
    const feeding = pipeline(body, ex).catch((err: Error) => {
      throw new InvalidArgumentError(`not a valid tar stream: ${err.message}`);
    });
    try {
      await Promise.all([consume, feeding]);
    } catch (err) {
      body.destroy();
      ex.destroy();
      if (err instanceof InvalidArgumentError || err instanceof NotFoundError || err instanceof AlreadyExistsError) throw err;
      throw new InvalidArgumentError(`not a valid tar stream: ${(err as Error).message}`);
    }
    for (const [d, t] of dirTimes.reverse()) await utimes(d, t, t).catch(() => undefined);
  }

  /** `keep` (adapter-only) filters entries by their name in the archive. */
  async packTar(path: string, keep: (name: string) => boolean = () => true): Promise<Readable> {
    const st = await lstat(path).catch((e) => { throw fsError(e, path); });
    const pack = tar.pack();
    const add = async (abs: string, name: string) => {
      if (name && !keep(name)) return;
      const s = await lstat(abs);
      const base = { name, mode: s.mode & 0o7777, mtime: s.mtime, uid: s.uid, gid: s.gid };
      if (s.isDirectory()) {
        if (name) await new Promise<void>((res, rej) => pack.entry({ ...base, type: 'directory' }, (e) => (e ? rej(e) : res())));
        for (const child of (await readdir(abs)).sort()) await add(join(abs, child), name ? `${name}/${child}` : child);
      } else if (s.isSymbolicLink()) {
        await new Promise<void>((res, rej) => pack.entry({ ...base, type: 'symlink', linkname: readlinkSync(abs) }, (e) => (e ? rej(e) : res())));
      } else if (s.isFile()) {
        const entry = pack.entry({ ...base, type: 'file', size: s.size });
        await pipeline(createReadStream(abs), entry);
      }
    };
    void (async () => {
      try {
        if (st.isDirectory()) await add(path, '');
        else await add(path, basename(path));
        pack.finalize();
      } catch (err) {
        pack.destroy(err as Error);
      }
    })();
    return pack as unknown as Readable;
  }

  async readTextDir(dir: string): Promise<Record<string, string>> {
    const out: Record<string, string> = {};
    let names: string[];
    try {
      names = await readdir(dir);
    } catch {
      return out;
    }
    for (const n of names.sort()) {
      if (n.startsWith('.')) continue;
      const text = await readFile(join(dir, n), 'utf8').catch(() => undefined);
      if (text !== undefined) out[n] = text.trim();
    }
    return out;
  }

  async exists(path: string): Promise<boolean> {
    return lstat(path).then(() => true, () => false);
  }
}
