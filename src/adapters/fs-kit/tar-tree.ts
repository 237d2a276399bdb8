import { constants as fsConstants, createReadStream, readlinkSync } from 'node:fs';
import { lchown, link, lstat, mkdir, open, readdir, realpath, rm, symlink } from 'node:fs/promises';
import { basename, dirname, join, relative, resolve } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import tar from 'tar-stream';
import {
  AlreadyExistsError,
  InsufficientStorageError,
  InvalidArgumentError,
  isNoSpace,
  noSpaceError,
  NotFoundError,
} from '../../domain/errors.js';
import { writeFileAtomic } from './atomic-file.js';

const NOFOLLOW = fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW;

/**
 * A tar entry's name as path components under the destination: `./` and `.` parts dropped, so
 * `./`, `./dir/` and `dir` are all fine; absolute names and `..` are refused. [] is the root.
 */
export function entryParts(name: string, dir: string): string[] {
  if (name.startsWith('/') || name.includes('\0'))
    throw new InvalidArgumentError(`tar entry ${JSON.stringify(name)} would land outside ${dir}`);
  const parts = name.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..'))
    throw new InvalidArgumentError(`tar entry ${JSON.stringify(name)} would land outside ${dir}`);
  return parts;
}

/**
 * Whose extracted entries are: `archive`, as the archive says (when this process may give files
 * away: as tar does for root); `self`, this process's user (as tar does for others, and docker cp
 * on the receiving host); or one uid and gid for them all (-1 keeps that half, as chown(2)).
 */
export type TarOwner = 'archive' | 'self' | { uid: number; gid: number };

/** The owner an entry gets, or undefined to leave it the extracting process's. */
function ownerOf(h: { uid?: number; gid?: number }, owner: TarOwner): { uid: number; gid: number } | undefined {
  if (owner === 'self' || process.getuid?.() !== 0) return undefined;
  if (owner !== 'archive') return owner;
  return h.uid === undefined && h.gid === undefined ? undefined : { uid: h.uid ?? 0, gid: h.gid ?? 0 };
}

/**
 * Makes `dir` and its missing parents (mkdir -p); those it made get `owner` (when this process may
 * give them away), so a copy as a user of a file into new folders leaves no folder of root's.
 */
export async function mkdirOwned(dir: string, owner?: { uid?: number; gid?: number }): Promise<void> {
  const first = await mkdir(dir, { recursive: true });
  if (first === undefined || !owner || (owner.uid === undefined && owner.gid === undefined)) return;
  if (process.getuid?.() !== 0) return;
  for (let d = resolve(dir); ; d = dirname(d)) {
    await lchown(d, owner.uid ?? -1, owner.gid ?? -1);
    if (d === first || d === dirname(d)) break;
  }
}

/**
 * The directory an entry lands in, made where missing, walking one component at a time from the
 * root and never through a link: a symlink on the way, whether the archive made it or it was there
 * before, is refused, so nothing is ever written outside the root. A fixed owner is given to what it makes.
 */
async function parentOf(
  root: string,
  parts: string[],
  name: string,
  dir: string,
  make: TarOwner | false = 'archive',
): Promise<string> {
  let cur = root;
  for (const p of parts.slice(0, -1)) {
    cur = join(cur, p);
    const st = await lstat(cur).catch(() => undefined);
    if (st === undefined) {
      if (make === false)
        throw new InvalidArgumentError(
          `tar entry ${JSON.stringify(name)} links to a file that was not extracted in ${dir}`,
        );
      await mkdir(cur, { mode: 0o755 });
      const given = typeof make === 'object' ? ownerOf({}, make) : undefined;
      if (given) await lchown(cur, given.uid, given.gid);
    } else if (st.isSymbolicLink())
      throw new InvalidArgumentError(
        `tar entry ${JSON.stringify(name)} goes through the link ${relative(root, cur)} in ${dir}; entries are never written through links`,
      );
    else if (!st.isDirectory())
      throw new InvalidArgumentError(
        `tar entry ${JSON.stringify(name)}: ${relative(root, cur)} in ${dir} is not a directory`,
      );
  }
  return cur;
}

/** Clears what stands where an entry goes (a link is removed, never followed); keeps a directory for a directory. */
async function clear(target: string, keepDir: boolean): Promise<void> {
  const st = await lstat(target).catch(() => undefined);
  if (st === undefined || (keepDir && st.isDirectory())) return;
  await rm(target, { recursive: st.isDirectory(), force: true });
}

/** Sets times and owner through a descriptor opened without following links. */
async function setMeta(
  target: string,
  h: tar.Header,
  owner: { uid: number; gid: number } | undefined,
  mode?: number,
): Promise<void> {
  const fh = await open(target, NOFOLLOW).catch(() => undefined);
  if (!fh) return;
  try {
    if (mode !== undefined) await fh.chmod(mode);
    if (owner) await fh.chown(owner.uid, owner.gid).catch(() => undefined);
    if (h.mtime && mode === undefined) await fh.utimes(h.mtime, h.mtime).catch(() => undefined);
  } finally {
    await fh.close();
  }
}

/** Why an extract stopped: a full disk as one, anything else the stream's fault. */
function notExtracted(err: unknown): Error {
  if (err instanceof InsufficientStorageError) return err;
  if (isNoSpace(err)) return noSpaceError(err, 'the disk');
  return new InvalidArgumentError(`not a valid tar stream: ${(err as Error).message}`);
}

/**
 * Extracts a tar stream into the existing directory `dir` (the agent's cp and the CLI's cp share
 * it), as tar makes them: `./` entries, symlinks pointing anywhere (they are only links in the
 * destination), hard links to files inside it. No entry is ever written through a link, whether
 * the archive made the link or it was already there, and metadata calls never follow links.
 * Anything else (a name outside, a hard link out, a device, not a tar stream) is InvalidArgument.
 */
export async function extractTree(dir: string, body: Readable, owner: TarOwner = 'archive'): Promise<void> {
  const root = await realpath(dir);
  const ex = tar.extract();
  const dirTimes: [string, Date][] = [];
  const consume = (async () => {
    for await (const entry of ex) {
      const h = entry.header;
      try {
        const parts = entryParts(h.name, dir);
        const mode = (h.mode ?? 0o644) & 0o7777;
        if (parts.length === 0) {
          // `./`: the destination itself, which is the caller's; its mode and owner stay.
          entry.resume();
          continue;
        }
        const target = join(await parentOf(root, parts, h.name, dir, owner), parts[parts.length - 1]);
        if (h.type === 'directory') {
          await clear(target, true);
          await mkdir(target, { mode }).catch((e: NodeJS.ErrnoException) => {
            if (e.code !== 'EEXIST') throw e;
          });
          await setMeta(target, h, ownerOf(h, owner), mode);
          if (h.mtime) dirTimes.push([target, h.mtime]);
          entry.resume();
        } else if (h.type === 'file' || h.type === 'contiguous-file') {
          await clear(target, false);
          await writeFileAtomic(target, entry as unknown as Readable, { mode, durable: false });
          await setMeta(target, h, ownerOf(h, owner));
        } else if (h.type === 'symlink') {
          await clear(target, false);
          await symlink(h.linkname ?? '', target);
          const given = ownerOf(h, owner);
          if (given) await lchown(target, given.uid, given.gid).catch(() => undefined);
          entry.resume();
        } else if (h.type === 'link') {
          const from = entryParts(h.linkname ?? '', dir);
          const src = join(await parentOf(root, from, h.name, dir, false), from[from.length - 1] ?? '');
          const st = from.length ? await lstat(src).catch(() => undefined) : undefined;
          if (!st?.isFile())
            throw new InvalidArgumentError(
              `tar entry ${JSON.stringify(h.name)} is a hard link to ${JSON.stringify(h.linkname)}, which is not a file extracted in ${dir}`,
            );
          await clear(target, false);
          await link(src, target);
          entry.resume();
        } else if (h.type === 'character-device' || h.type === 'block-device' || h.type === 'fifo') {
          entry.resume(); // devices and fifos are not copied
        } else {
          throw new InvalidArgumentError(
            `tar entry ${JSON.stringify(h.name)} has a type svc does not extract (${String(h.type)}); GNU sparse files need tar without --sparse`,
          );
        }
      } catch (err) {
        entry.resume();
        throw err;
      }
    }
  })();
  const feeding = pipeline(body, ex).catch((err: Error) => {
    throw notExtracted(err);
  });
  try {
    await Promise.all([consume, feeding]);
  } catch (err) {
    body.destroy();
    ex.destroy();
    if (err instanceof InvalidArgumentError || err instanceof NotFoundError || err instanceof AlreadyExistsError)
      throw err;
    throw notExtracted(err);
  }
  for (const [d, t] of dirTimes.reverse()) {
    const fh = await open(d, NOFOLLOW).catch(() => undefined);
    await fh?.utimes(t, t).catch(() => undefined);
    await fh?.close();
  }
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
      if (name)
        await new Promise<void>((res, rej) => pack.entry({ ...base, type: 'directory' }, (e) => (e ? rej(e) : res())));
      for (const child of (await readdir(abs)).sort()) await add(join(abs, child), name ? `${name}/${child}` : child);
    } else if (s.isSymbolicLink()) {
      await new Promise<void>((res, rej) =>
        pack.entry({ ...base, type: 'symlink', linkname: readlinkSync(abs) }, (e) => (e ? rej(e) : res())),
      );
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

/**
 * A tar of a directory's contents (packTree's, names relative to it) as a tar of the directory
 * itself, as `docker cp NAME:/dir -` streams one: its own entry first, then every entry under
 * `name/` (a hard link's target too; a symlink's is a path in the guest and stays).
 */
export function underFolder(contents: Readable, name: string, dir: { mode: number; mtime: Date }): Readable {
  const ex = tar.extract();
  const pack = tar.pack();
  pack.entry({ name, type: 'directory', mode: dir.mode, mtime: dir.mtime });
  ex.on('entry', (h, body, next) => {
    const header = { ...h, name: `${name}/${h.name}` };
    if (h.type === 'link' && h.linkname) header.linkname = `${name}/${h.linkname}`;
    const done = (err?: Error | null) => (err ? ex.destroy(err) : next());
    if (h.type === 'file' || h.type === 'contiguous-file') body.pipe(pack.entry(header, done));
    else {
      body.resume();
      pack.entry(header, done);
    }
  });
  ex.on('finish', () => pack.finalize());
  ex.on('error', (err) => pack.destroy(err));
  contents.on('error', (err) => ex.destroy(err));
  contents.pipe(ex);
  return pack as unknown as Readable;
}
