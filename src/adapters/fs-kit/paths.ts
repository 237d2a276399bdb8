import { realpath } from 'node:fs/promises';
import { sep } from 'node:path';

/** Is `path` the folder `dir` or inside it (both already resolved)? */
export const within = (path: string, dir: string) =>
  path === dir || path.startsWith(dir.endsWith(sep) ? dir : dir + sep);

/** A path with its links resolved, or the path itself when it does not exist (so a rule can name a future folder). */
export const realOrSelf = (p: string) => realpath(p).catch(() => p);
