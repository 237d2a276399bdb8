import type { Readable, Writable } from 'node:stream';

export interface SpawnRequest {
  cmd: string;
  args: string[];
  cwd?: string;
  /** Without `cwd`: start here when it is a directory, else in / (as a login starts in its home). */
  home?: string;
  uid?: number;
  gid?: number;
  /** With `uid`: the user's supplementary groups, its gid among them (as login sets them). */
  groups?: number[];
  env?: Record<string, string>;
}

export interface ProcessExit {
  /** Exit code, or null when killed by a signal. */
  code: number | null;
  signal: string | null;
}

export interface RunningProcess {
  pid: number;
  stdin: Writable;
  stdout: Readable;
  stderr: Readable;
  /** Resolves when the process has exited and its output streams have ended. */
  exited: Promise<ProcessExit>;
  /** Kills the process and everything it started (its process group). Idempotent. */
  kill(): void;
}

export const ProcessRunner = Symbol('ProcessRunner');
/** Starts guest processes. */
export interface ProcessRunner {
  /** Throws SpawnError when the command cannot start (not found, not permitted, bad cwd). */
  spawn(req: SpawnRequest): Promise<RunningProcess>;
}

export class SpawnError extends Error {}
