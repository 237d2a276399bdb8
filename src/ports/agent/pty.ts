export interface PtyOptions {
  /** The program: a path, or a name looked up in the PATH of `env` (else the agent's). */
  shell: string;
  /** Its arguments (none for a shell). */
  args?: string[];
  cols: number;
  rows: number;
  cwd?: string;
  /** Without `cwd`: start here when it is a directory, else in / (as a login starts in its home). */
  home?: string;
  env?: Record<string, string>;
  /** Run as this uid and gid (the agent runs as root), with these supplementary groups. */
  uid?: number;
  gid?: number;
  groups?: number[];
}

export interface PtySession {
  pid: number;
  write(data: string | Buffer): void;
  resize(cols: number, rows: number): void;
  onData(listener: (data: Buffer) => void): void;
  onExit(listener: (exitCode: number) => void): void;
  /** Idempotent. */
  kill(): void;
}

export const PtyFactory = Symbol('PtyFactory');
/** Opens terminals. Linux guests only have real ones. */
export interface PtyFactory {
  /** NotFoundError when the program is not there (or not a file it can run). */
  open(opts: PtyOptions): PtySession;
  /** The shell to use when the caller names none. */
  defaultShell(): string;
}
