import type { Readable } from 'node:stream';
import type { FsInfo } from '../../domain/agent.js';

export interface WriteOptions {
  mode: number;
  uid?: number;
  gid?: number;
  /** false: no fsync of the file and its directory (notes the agent can lose in a crash). Default true. */
  durable?: boolean;
}

export const GuestFiles = Symbol('GuestFiles');
/**
 * The guest filesystem as the agent uses it. Paths are absolute (the app checks). Errors are
 * domain errors: NotFoundError (ENOENT), InvalidArgumentError (bad input, escape attempts),
 * AlreadyExistsError (EEXIST, ENOTEMPTY).
 */
export interface GuestFiles {
  stat(path: string): Promise<FsInfo>;
  readdir(path: string): Promise<FsInfo[]>;
  mkdir(path: string, recursive: boolean, mode: number): Promise<void>;
  symlink(path: string, target: string): Promise<void>;
  remove(path: string, recursive: boolean): Promise<void>;
  /** Streams `body` to a temp file beside `path`, applies mode/owner, renames. Creates parents. */
  writeFile(path: string, body: Readable, opts: WriteOptions): Promise<void>;
  /** A stream of a regular file. InvalidArgumentError for a directory. */
  readFile(path: string): Promise<{ size: number; body: Readable }>;
  /**
   * Extracts a tar stream into directory `dir` (made, with missing parents, where absent); refuses
   * entries that would land outside it. With `owner`, everything it makes is that uid's and gid's;
   * without, entries keep the archive's owners.
   */
  extractTar(dir: string, body: Readable, owner?: { uid?: number; gid?: number }): Promise<void>;
  /** A tar of a directory's contents (relative to it), or of one file under its base name. */
  packTar(path: string): Promise<Readable>;
  /** Small text files of a directory as name -> trimmed content; `{}` when the directory is absent. */
  readTextDir(dir: string): Promise<Record<string, string>>;
  exists(path: string): Promise<boolean>;
}

export const StatsSource = Symbol('StatsSource');
export interface StatsSource {
  read(): Promise<import('../../domain/agent.js').GuestStats>;
}
