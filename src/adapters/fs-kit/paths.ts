import { realpath } from 'node:fs/promises';
import { resolve, sep } from 'node:path';

/** Is `path` the folder `dir` or inside it (both already resolved)? */
export const within = (path: string, dir: string) =>
  path === dir || path.startsWith(dir.endsWith(sep) ? dir : dir + sep);

/** A path with its links resolved, or the path itself when it does not exist (so a rule can name a future folder). */
export const realOrSelf = (p: string) => realpath(p).catch(() => p);

/**
 * Is `path`, as written (made absolute, `..` folded, links not followed), inside one of `dirs`
 * (each as configured or with its links resolved)? Checked before anything is asked of the
 * filesystem, so an error about a path outside says nothing of what exists there.
 */
/** Allowed folders as configured and with their links resolved (for `writtenWithin` and the real-path check after it). */
export const allowedDirs = (dirs: readonly string[]): Promise<AllowedDir[]> =>
  Promise.all(dirs.map(async (configured) => ({ configured, real: await realOrSelf(configured) })));

export interface AllowedDir {
  configured: string;
  real: string;
}

export const writtenWithin = (path: string, dirs: readonly AllowedDir[]) => {
  const p = resolve(path);
  return dirs.some((d) => within(p, resolve(d.configured)) || within(p, d.real));
};
