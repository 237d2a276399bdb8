import { lstat } from 'node:fs/promises';

/** Is there anything at `path` (a file, a folder, a link, even one that points nowhere)? Links are not followed. */
export const exists = (path: string): Promise<boolean> =>
  lstat(path).then(
    () => true,
    () => false,
  );
