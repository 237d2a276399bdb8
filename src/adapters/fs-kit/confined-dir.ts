import { constants as C, type Stats } from 'node:fs';
import { lstat, mkdir, open, readdir, readlink, rename, rm, rmdir, unlink, type FileHandle } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { AlreadyExistsError, InvalidArgumentError, InvalidStateError, NotFoundError } from '../../domain/errors.js';
import { copyInto } from './atomic-file.js';

/**
 * A folder on the host that something else writes into (a guest, through a share), used from the
 * host without ever leaving it. Every path is walked one name at a time through open directory
 * descriptors (`/proc/self/fd/N/name`, which resolves in the directory N is open on, as openat
 * does), each opened with O_NOFOLLOW: a link anywhere on the way, even one swapped in while a call
 * runs, is refused, never followed. The last name is acted on through its parent's descriptor the
 * same way, and metadata is set through a descriptor of the file itself. Linux only (`/proc`).
 */
/** The most entries a listing answers. */
const MAX_LISTED = 100_000;

/** An entry: where it is under the root, its name, its lstat, and a link's target (never followed). */
export interface ConfinedEntry {
  path: string;
  name: string;
  st: Stats;
  target?: string;
}

export class ConfinedDir {
  constructor(readonly root: string) {}

  /** What is at `path` (relative to the root, `/` or `` the root itself), a link not followed. */
  async stat(path: string): Promise<ConfinedEntry> {
    const parts = partsOf(path);
    if (!parts.length) return { path: '/', name: '', st: await lstat(this.root) };
    return this.inParent(parts, false, async (dir, name) => {
      const st = await lstat(at(dir, name)).catch(notFound(path));
      return { path: `/${parts.join('/')}`, name, st, ...(await linkOf(dir, name, st)) };
    });
  }

  /** The entries under the folder `path`, `depth` levels down (1: its own entries), at most `max`. */
  async list(path: string, depth = 1, max = MAX_LISTED): Promise<ConfinedEntry[]> {
    const out: ConfinedEntry[] = [];
    const walk = async (parts: string[], left: number): Promise<void> => {
      await this.withDir(parts, false, async (dir) => {
        for (const name of (await readdir(at(dir, ''))).sort()) {
          if (out.length >= max) return; // a guest's folder may hold millions: the answer is bounded
          const st = await lstat(at(dir, name)).catch(() => undefined);
          if (!st) continue; // gone meanwhile
          out.push({ path: `/${[...parts, name].join('/')}`, name, st, ...(await linkOf(dir, name, st)) });
          if (left > 1 && st.isDirectory()) await walk([...parts, name], left - 1);
        }
      });
    };
    await walk(partsOf(path), Math.max(1, depth));
    return out;
  }

  /** Makes the folder `path`; with `parents`, the folders above it too, and an existing one is fine. */
  async mkdir(path: string, o: { parents?: boolean; mode?: number } = {}): Promise<void> {
    const parts = partsOf(path);
    if (!parts.length) throw new AlreadyExistsError('the volume root exists');
    await this.inParent(parts, !!o.parents, async (dir, name) => {
      await mkdir(at(dir, name), { mode: o.mode ?? 0o755 }).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'EEXIST') throw err;
        if (!o.parents) throw new AlreadyExistsError(`${path} exists`);
      });
    });
  }

  /** A stream of the file `path` (a link or a folder is refused). */
  async read(path: string): Promise<{ stream: Readable; size: number }> {
    const parts = partsOf(path);
    return this.inParent(parts, false, async (dir, name) => {
      const fh = await open(at(dir, name), C.O_RDONLY | C.O_NOFOLLOW).catch(notFound(path));
      const st = await fh.stat();
      if (!st.isFile()) {
        await fh.close();
        throw new InvalidStateError(`${path} is not a file`);
      }
      // the size it had when opened, however a guest changes it meanwhile (it is the answer's length)
      if (!st.size) {
        await fh.close();
        return { stream: Readable.from([]), size: 0 };
      }
      return { stream: fh.createReadStream({ end: st.size - 1 }), size: st.size };
    });
  }

  /**
   * Writes `body` to the file `path` through a temporary file renamed over it, so a reader sees the
   * old file or the new one whole. An existing file is replaced only with `force`; the folders above
   * must exist unless `parents`.
   */
  async write(path: string, body: Readable, o: { force?: boolean; parents?: boolean; mode?: number } = {}) {
    const parts = partsOf(path);
    if (!parts.length) throw new InvalidArgumentError('a file needs a name');
    await this.inParent(parts, !!o.parents, async (dir, name) => {
      const there = await lstat(at(dir, name)).catch(() => undefined);
      if (there?.isDirectory()) throw new InvalidStateError(`${path} is a folder`);
      if (there && !o.force) throw new AlreadyExistsError(`${path} exists (force replaces it)`);
      const tmp = `.${name}.${randomBytes(6).toString('hex')}.tmp`;
      const fh = await open(at(dir, tmp), C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW, o.mode ?? 0o644);
      try {
        // the stream closes the file when it ends, after an fsync (`flush`)
        await copyInto(body, fh.createWriteStream({ flush: true, highWaterMark: 1 << 20 }));
      } catch (err) {
        await fh.close().catch(() => undefined);
        await rm(at(dir, tmp), { force: true });
        throw err;
      }
      await rename(at(dir, tmp), at(dir, name));
    });
  }

  /** Removes `path`: a file, a link (not what it points at), or a folder with all it holds. */
  async remove(path: string): Promise<void> {
    const parts = partsOf(path);
    if (!parts.length) throw new InvalidArgumentError('the volume root is not removed');
    await this.inParent(parts, false, async (dir, name) => {
      await lstat(at(dir, name)).catch(notFound(path));
      await removeIn(dir, name);
    });
  }

  /** Sets the owner and mode of `path` through a descriptor of it (a link is refused). */
  async setMeta(path: string, m: { uid?: number; gid?: number; mode?: number }): Promise<void> {
    const apply = async (fh: FileHandle) => {
      if (m.mode !== undefined) await fh.chmod(m.mode);
      if (m.uid !== undefined || m.gid !== undefined) await fh.chown(m.uid ?? -1, m.gid ?? -1);
    };
    const parts = partsOf(path);
    if (!parts.length) return this.withDir([], false, apply);
    await this.inParent(parts, false, async (dir, name) => {
      const fh = await open(at(dir, name), C.O_RDONLY | C.O_NOFOLLOW).catch(notFound(path));
      try {
        await apply(fh);
      } finally {
        await fh.close();
      }
    });
  }

  /** Runs `fn` with the folder that holds the last of `parts` open, and that last name. */
  private inParent<T>(parts: string[], make: boolean, fn: (dir: FileHandle, name: string) => Promise<T>): Promise<T> {
    return this.withDir(parts.slice(0, -1), make, (dir) => fn(dir, parts[parts.length - 1]));
  }

  /** Opens the folders of `parts` one by one from the root, never through a link, making them with `make`. */
  private async withDir<T>(parts: string[], make: boolean, fn: (dir: FileHandle) => Promise<T>): Promise<T> {
    let dir = await open(this.root, C.O_RDONLY | C.O_DIRECTORY);
    try {
      for (const [i, p] of parts.entries()) {
        if (make) await mkdir(at(dir, p), { mode: 0o755 }).catch(() => undefined);
        const next = await open(at(dir, p), C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW).catch(
          (err: NodeJS.ErrnoException) => {
            const where = `/${parts.slice(0, i + 1).join('/')}`;
            if (err.code === 'ENOENT') throw new NotFoundError(`${where} not found`);
            if (err.code === 'ELOOP' || err.code === 'ENOTDIR')
              throw new InvalidStateError(`${where} is not a folder (links are not followed)`);
            throw err;
          },
        );
        await dir.close();
        dir = next;
      }
      return await fn(dir);
    } finally {
      await dir.close().catch(() => undefined);
    }
  }
}

/**
 * Removes `name` in `dir`: a folder through a descriptor of it, so what it holds is removed there
 * even if the name is swapped for a link meanwhile (rmdir and unlink never follow one).
 */
async function removeIn(dir: FileHandle, name: string): Promise<void> {
  const st = await lstat(at(dir, name)).catch(() => undefined);
  if (!st) return;
  if (!st.isDirectory()) return void (await unlink(at(dir, name)).catch(ignoreGone));
  const sub = await open(at(dir, name), C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW).catch(() => undefined);
  if (!sub) return void (await unlink(at(dir, name)).catch(ignoreGone)); // swapped for a link: that goes
  try {
    for (const child of await readdir(at(sub, ''))) await removeIn(sub, child);
  } finally {
    await sub.close();
  }
  await rmdir(at(dir, name)).catch(ignoreGone);
}

/** A link's target, read from the link itself. */
const linkOf = async (dir: FileHandle, name: string, st: Stats) =>
  st.isSymbolicLink() ? { target: await readlink(at(dir, name)).catch(() => '') } : {};

const ignoreGone = (err: NodeJS.ErrnoException) => {
  if (err.code !== 'ENOENT') throw err;
};

/** A path's names: `/a/b`, `a/b/` and `./a//b` are the same; `..`, NUL and over-long names are refused. */
function partsOf(path: string): string[] {
  if (typeof path !== 'string' || path.includes('\0') || path.length > 4096)
    throw new InvalidArgumentError('path must be a string of at most 4096 characters');
  const parts = path.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) throw new InvalidArgumentError(`path ${JSON.stringify(path)}: .. is not allowed`);
  if (parts.some((p) => Buffer.byteLength(p) > 255)) throw new InvalidArgumentError('a name is at most 255 bytes');
  return parts;
}

/** `name` in the folder `dir` is open on, resolved there whatever the folder's path is now. */
const at = (dir: FileHandle, name: string) => `/proc/self/fd/${dir.fd}${name ? `/${name}` : ''}`;

const notFound = (path: string) => (err: NodeJS.ErrnoException) => {
  if (err.code === 'ENOENT') throw new NotFoundError(`${path} not found`);
  if (err.code === 'ELOOP') throw new InvalidStateError(`${path} is a link (links are not followed)`);
  throw err;
};
