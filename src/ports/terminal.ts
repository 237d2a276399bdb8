/**
 * A terminal on either end of the shell protocol: an agent's PTY session, or the daemon's session
 * with an agent. Binary data both ways, resize, and the exit code when the shell ends (null when
 * the connection broke first).
 */
export interface Terminal {
  write(data: Buffer): void;
  resize(cols: number, rows: number): void;
  onData(listener: (data: Buffer) => void): void;
  onExit(listener: (exitCode: number | null) => void): void;
  close(): void;
}
