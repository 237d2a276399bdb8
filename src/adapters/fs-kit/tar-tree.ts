import { createReadStream, readlinkSync } from 'node:fs';
import { chmod, lchown, lstat, mkdir, readdir, realpath, rm, symlink, utimes } from 'node:fs/promises';
import { basename, dirname, join, posix, relative, resolve } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import tar from 'tar-stream';
import { AlreadyExistsError, InvalidArgumentError, NotFoundError } from '../../domain/errors.js';
import { writeFileAtomic } from './atomic-file.js';

function inside(root: string, p: string): boolean {
  const rel = relative(root, p);
  return rel === '' || (!rel.startsWith('..') && !posix.isAbsolute(rel));
}

/**
 * Extracts a tar stream into the existing directory `dir` (the agent's cp and the CLI's cp share
 * it). Entries that would land outside `dir`, or go through a link out of it, are refused with
 * InvalidArgumentError; so is anything that is not a tar stream.
 */
export async function extractTree(dir: string, body: Readable): Promise<void> {
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
          await writeFileAtomic(target, entry as unknown as Readable, { mode, durable: false });
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

/** Packs a file or a directory tree as a tar stream; `keep` filters entries by their name. */
export async function packTree(path: string, keep: (name: string) => boolean = () => true): Promise<Readable> {
  const st = await lstat(path);
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
