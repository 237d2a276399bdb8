import { createReadStream } from 'node:fs';
import { lstat, mkdir, readdir, readFile, readlink, rm, rmdir, stat, symlink, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import { injectable } from 'inversify';
import { formatMode, type FsInfo } from '../../domain/agent.js';
import {
  AlreadyExistsError,
  InsufficientStorageError,
  InternalError,
  InvalidArgumentError,
  NotFoundError,
} from '../../domain/errors.js';
import type { GuestFiles, WriteOptions } from '../../ports/agent/guest-files.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import { exists as existsAt } from '../fs-kit/exists.js';
import { extractTree, mkdirOwned, packTree } from '../fs-kit/tar-tree.js';

/** Maps Node fs errors to domain errors with the path in the message. */
function fsError(err: unknown, path: string): Error {
  const e = err as NodeJS.ErrnoException;
  switch (e.code) {
    case 'ENOENT':
      return new NotFoundError(`${path}: no such file or directory`);
    case 'EEXIST':
      return new AlreadyExistsError(`${path}: already exists`);
    case 'ENOTEMPTY':
      return new AlreadyExistsError(`${path}: directory not empty; use recursive=true`);
    case 'ENOTDIR':
      return new InvalidArgumentError(`${path}: a path component is not a directory`);
    case 'EISDIR':
      return new InvalidArgumentError(`${path}: is a directory`);
    case 'EACCES':
    case 'EPERM':
      return new InvalidArgumentError(`${path}: permission denied`);
    case 'EINVAL':
      return new InvalidArgumentError(`${path}: invalid argument`);
    case 'EROFS':
      return new InvalidArgumentError(`${path}: read-only file system`);
    case 'ENAMETOOLONG':
      return new InvalidArgumentError(`${path}: name too long`);
    case 'ELOOP':
      return new InvalidArgumentError(`${path}: too many levels of symbolic links`);
    case 'ENOSPC':
    case 'EDQUOT':
      return new InsufficientStorageError(`${path}: no space left on the guest's disk`);
    default:
      return new InternalError(`${path}: ${e.message}`);
  }
}

async function info(path: string): Promise<FsInfo> {
  const st = await lstat(path);
  const type = st.isFile() ? 'file' : st.isDirectory() ? 'directory' : st.isSymbolicLink() ? 'symlink' : 'other';
  const out: FsInfo = {
    name: basename(path) || '/',
    path,
    type,
    size: st.size,
    mode: formatMode(st.mode),
    mtime: st.mtime.toISOString(),
  };
  if (type === 'symlink') out.target = await readlink(path);
  return out;
}

/** The guest filesystem through node:fs, with tar by tar-stream. Writes are temp + rename. */
@injectable()
export class NodeGuestFiles implements GuestFiles {
  async stat(path: string): Promise<FsInfo> {
    return info(path).catch((e) => {
      throw fsError(e, path);
    });
  }

  async readdir(path: string): Promise<FsInfo[]> {
    const names = await readdir(path).catch((e) => {
      throw fsError(e, path);
    });
    const out: FsInfo[] = [];
    for (const n of names.sort()) {
      const entry = await info(join(path, n)).catch(() => undefined);
      if (entry) out.push(entry);
    }
    return out;
  }

  async mkdir(path: string, recursive: boolean, mode: number): Promise<void> {
    await mkdir(path, { recursive, mode }).catch((e) => {
      throw fsError(e, path);
    });
  }

  async symlink(path: string, target: string): Promise<void> {
    await symlink(target, path).catch((e) => {
      throw fsError(e, path);
    });
  }

  async remove(path: string, recursive: boolean): Promise<void> {
    const st = await lstat(path).catch((e) => {
      throw fsError(e, path);
    });
    if (st.isDirectory()) {
      if (recursive) await rm(path, { recursive: true, force: true });
      else
        await rmdir(path).catch((e) => {
          throw fsError(e, path);
        });
    } else {
      await unlink(path).catch((e) => {
        throw fsError(e, path);
      });
    }
  }

  async writeFile(path: string, body: Readable, opts: WriteOptions): Promise<void> {
    const dir = dirname(path);
    await mkdirOwned(dir, opts).catch((e) => {
      throw fsError(e, dir);
    });
    const existing = await stat(path).catch(() => undefined);
    if (existing?.isDirectory()) {
      body.resume();
      throw new InvalidArgumentError(`${path}: is a directory; use mode=tar to write into it`);
    }
    await writeFileAtomic(path, body, { mode: opts.mode, uid: opts.uid, gid: opts.gid, durable: opts.durable }).catch(
      (err: unknown) => {
        body.resume();
        throw fsError(err, path);
      },
    );
  }

  async readFile(path: string): Promise<{ size: number; body: Readable }> {
    const st = await stat(path).catch((e) => {
      throw fsError(e, path);
    });
    if (st.isDirectory()) throw new InvalidArgumentError(`${path}: is a directory; use mode=tar`);
    if (!st.isFile()) throw new InvalidArgumentError(`${path}: not a regular file`);
    // 1 MiB reads (not 64 KiB): a sixteenth of the file reads, and socket writes as big.
    return { size: st.size, body: createReadStream(path, { highWaterMark: 1 << 20 }) };
  }

  async extractTar(dir: string, body: Readable, owner?: { uid?: number; gid?: number }): Promise<void> {
    await mkdirOwned(dir, owner).catch((e) => {
      throw fsError(e, dir);
    });
    await extractTree(dir, body, owner ? { uid: owner.uid ?? -1, gid: owner.gid ?? -1 } : 'archive');
  }

  /** `keep` (adapter-only) filters entries by their name in the archive. */
  async packTar(path: string, keep: (name: string) => boolean = () => true): Promise<Readable> {
    await lstat(path).catch((e) => {
      throw fsError(e, path);
    });
    return packTree(path, keep);
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

  exists(path: string): Promise<boolean> {
    return existsAt(path);
  }
}
