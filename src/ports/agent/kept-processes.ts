import type { Readable } from 'node:stream';
import type { ProcessStream } from '../../domain/processes.js';
import type { RestartPolicy } from '../../domain/restart-policy.js';

/**
 * What is kept of a durable process or a watch on the guest's disk (docs/processes.md): written
 * when it starts, read by every agent that comes after.
 */
export interface KeptRecord {
  id: string;
  kind: 'process' | 'watch';
  pid: number;
  keeper_pid: number;
  cmd: string;
  args: string[];
  tag?: string;
  pty: boolean;
  stdin: boolean;
  started_at: string;
  /** The kernel's boot id when it started: a record of another boot ended with that boot. */
  boot_id: string;
  /** The guest's host name when it started (a clone's copy was started in its template). */
  host: string;
  watch?: { path: string; recursive: boolean };
  restart?: KeptRestart;
}

/** A kept process's restart policy: svc-keep starts it again when it ends (docs/processes.md). */
export interface KeptRestart {
  policy: RestartPolicy;
  /** At most this many times; absent: no limit. */
  max?: number;
}

/** The current run of a process kept with a restart policy (svc-keep's run.json). */
export interface KeptRun {
  /** Its pid; 0 when the last try could not start it. */
  pid: number;
  /** Times it was started again. */
  restarts: number;
}

/** How a kept process ended (its keeper's exit.json, or what the agent found: a reboot, a keeper gone). */
export interface KeptEnd {
  code?: number;
  signal?: number;
  reason?: 'reboot' | 'lost';
  ended_at_ms: number;
}

/** One stream's journal: the bytes kept are [first, end); a gap inside is where bytes were lost. */
export interface StreamRange {
  first: number;
  end: number;
}

export interface JournalRead {
  /** Where `data` starts: `from`, or later when bytes before it are no longer kept (truncated). */
  offset: number;
  data: Buffer;
}

/** One stream's journal read on by one follower, what it holds open kept between reads. */
export interface JournalReader {
  /** Up to `max` bytes from `from` (or from the first kept byte after it). */
  read(from: number, max: number): Promise<JournalRead>;
  close(): Promise<void>;
}

export interface KeeperSpawn {
  kind: 'process' | 'watch';
  cmd: string;
  args: string[];
  /** On top of the agent's own environment. */
  env: Record<string, string>;
  cwd?: string;
  uid?: number;
  gid?: number;
  groups?: number[];
  pty?: { cols: number; rows: number };
  stdin: boolean;
  tag?: string;
  host: string;
  watch?: { path: string; recursive: boolean };
  restart?: KeptRestart;
  /** Bytes kept per stream. */
  capBytes: number;
}

export const KeptProcesses = Symbol('KeptProcesses');
/**
 * The kept processes: each run by a keeper (svc-keep) that outlives the agent and journals its
 * output to files, which this port reads. Ids are allocated here, never reused within the
 * guest's disk's life.
 */
export interface KeptProcesses {
  /** Null when processes can be kept; else why not (the keeper is not built). */
  unavailable(): string | null;
  /** Starts one; SpawnError (from process-runner) when the command cannot start. */
  start(spawn: KeeperSpawn): Promise<KeptRecord>;
  list(kind: 'process' | 'watch'): Promise<KeptRecord[]>;
  get(id: string): Promise<KeptRecord | null>;
  /**
   * How it ended, or null while its keeper runs. A record whose keeper is gone without an end is
   * ended here (`reboot` when the boot id changed, else `lost`).
   */
  end(id: string): Promise<KeptEnd | null>;
  /** The current run of one kept with a restart policy; null for the others (their run is the record's). */
  run(id: string): Promise<KeptRun | null>;
  range(id: string, stream: ProcessStream): Promise<StreamRange>;
  /** A reader of one stream's journal, the segment it reads kept open between reads; closed by the caller. */
  reader(id: string, stream: ProcessStream): JournalReader;
  /**
   * Resolves when its journal or end may have changed, after `ms` at most, or when `signal` aborts.
   * `moved` is asked once the wait is set up: what changed between the caller's last look and then
   * would otherwise be noticed only when the time is up.
   */
  changed(id: string, ms: number, signal?: AbortSignal, moved?: () => Promise<boolean>): Promise<void>;
  /** Bytes for its input (started with stdin). */
  stdin(id: string, body: Readable): Promise<void>;
  /** A line for its keeper: `eof`, `resize COLS ROWS`. */
  control(id: string, line: string): Promise<void>;
  /**
   * Sends a signal to its process group (its current run's). With a restart policy, INT, QUIT, KILL
   * and TERM also end the restarts.
   */
  signal(id: string, signal: string): Promise<void>;
  /** Kills it if it runs, waits for its end (a moment), and removes what is kept. */
  remove(id: string): Promise<void>;
}

export interface GuestUser {
  uid: number;
  gid: number;
  groups: number[];
  home: string;
  name: string;
  shell: string;
}

export const GuestUsers = Symbol('GuestUsers');
/** The guest's users (/etc/passwd and /etc/group). */
export interface GuestUsers {
  /** By name or number; null when there is no such user. */
  find(user: string): Promise<GuestUser | null>;
}
