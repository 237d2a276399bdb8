import type { VmRecord } from '../domain/vm.js';
import type { EntrypointChoice } from '../domain/restart-policy.js';
import type { ActivityEvent, MetricsPoint, SecretRecord } from '../domain/events.js';

export const VmStore = Symbol('VmStore');
/** Persists VM records. Writes are crash-safe: a reader sees the old or the new record, never half. */
export interface VmStore {
  list(): Promise<VmRecord[]>;
  /** Returns undefined when absent. */
  get(name: string): Promise<VmRecord | undefined>;
  /** Creates the VM directory if needed and writes the record. Idempotent. */
  put(record: VmRecord): Promise<void>;
  /** Removes the record and the whole VM directory. Idempotent. */
  remove(name: string): Promise<void>;
  /** Moves a VM's record and directory to a new name (a claimed pool member). Not idempotent. */
  rename(from: string, to: string): Promise<void>;
  /** The VM's directory (disks, sockets, metrics.ring live there). */
  dir(name: string): string;
  /** Copies files worth keeping after a failed create (hypervisor logs) to the logs directory. */
  keepLogs(name: string): Promise<void>;
  /**
   * What a move carries: the regular files in the VM's directory but its record, then those in its
   * `snapshots` folder (to two folders down; names are paths there), with their sizes.
   */
  files(name: string): Promise<VmFile[]>;
  /**
   * Takes in a VM from elsewhere (a move): `fill` writes its files into a fresh directory, the
   * record is written beside them, and the directory is put in place whole, or not at all (a
   * failure, or a daemon that dies meanwhile, leaves nothing a start would load). AlreadyExistsError
   * when the VM's directory exists.
   */
  receive(record: VmRecord, fill: (dir: string) => Promise<void>): Promise<void>;
}

/** One file of a VM's directory (`name`: its path within it). */
export interface VmFile {
  name: string;
  path: string;
  size: number;
}

export const ActivityLog = Symbol('ActivityLog');
/** The control-plane activity ring (last 1000 entries). */
export interface ActivityLog {
  record(e: Omit<ActivityEvent, 'id' | 't'>): void;
  /** Newest first. */
  list(opts: { limit?: number; since?: number }): Promise<ActivityEvent[]>;
  flush(): Promise<void>;
}

export const SecretStore = Symbol('SecretStore');
/** Host secrets, encrypted at rest. */
export interface SecretStore {
  /** Checks the sealing key can be used (a fresh data dir has none yet); InternalError naming the file otherwise. */
  verify(): Promise<void>;
  list(): Promise<SecretRecord[]>;
  /** Creates or replaces. */
  put(name: string, value: Buffer, mode: string): Promise<SecretRecord>;
  /** Throws NotFoundError. */
  get(name: string): Promise<{ record: SecretRecord; value: Buffer }>;
  /** Throws NotFoundError. */
  remove(name: string): Promise<void>;
}

export interface MetricsSeries {
  capacity: number;
  interval_ms: number;
  points: MetricsPoint[];
}

export const MetricsHistory = Symbol('MetricsHistory');
/** The per-VM ring of guest stats samples (vms/<name>/metrics.ring). */
export interface MetricsHistory {
  /** O(1). Creates the ring on first append. */
  append(vm: string, point: MetricsPoint): Promise<void>;
  /** Oldest first. An absent ring reads as no points. */
  read(vm: string, opts: { since?: number; limit?: number }): Promise<MetricsSeries>;
  close(vm: string): Promise<void>;
}

export const ConsoleLogs = Symbol('ConsoleLogs');
/** A VM's console (serial) log. */
export interface ConsoleLogs {
  /**
   * From byte `from` of the log, or its last `tail` bytes (all when neither is given), then, with
   * `follow`, what is appended until `signal` aborts. An absent log reads as empty.
   */
  read(
    vm: string,
    opts: { from?: number; tail?: number; follow?: boolean; signal?: AbortSignal },
  ): AsyncIterable<Buffer>;
  /** How many bytes the console has printed so far (0 when there is no log): cheap, for watching it grow. */
  size(vm: string): Promise<number>;
}

/** A booted guest of an image, suspended, that creates of its shape are restored from. */
export interface ImageSnapshotRecord {
  /** Hex digest of everything that makes the guest: image and its build, shape, the driver's key. */
  key: string;
  image: string;
  /** The image's revision it was booted from (ImageInfo.revision). */
  revision: string;
  cpus: number;
  memory_mb: number;
  /** Its guest runs no image entrypoint (`entrypoint: false`), or runs it with a restart policy; absent: as it is. */
  entrypoint?: EntrypointChoice;
  /** The disk it was booted with (the image's smallest): copies grow theirs from it. */
  disk_gb: number;
  created_at: string;
  /** How long the boot and suspend took. */
  capture_ms: number;
  /** What its files take on the host. */
  size_bytes: number;
}

export const SnapshotStore = Symbol('SnapshotStore');
/**
 * Where image snapshots live: a directory each, which the hypervisor fills as it fills a VM's, and
 * a record written last, so a snapshot is complete or absent (docs/snapshot-creates.md).
 */
export interface SnapshotStore {
  /** The complete snapshots. */
  list(): Promise<ImageSnapshotRecord[]>;
  /** Snapshots begun and never completed (a daemon that stopped mid-capture): their keys. */
  unfinished(): Promise<string[]>;
  /** The directory of snapshot `key`. */
  dir(key: string): string;
  /** Starts snapshot `key`: its directory, empty. */
  begin(key: string): Promise<string>;
  /** Completes it: the record, with the size of its files, written atomically. */
  commit(rec: Omit<ImageSnapshotRecord, 'size_bytes'>): Promise<ImageSnapshotRecord>;
  /** Removes its record and directory. Idempotent. */
  remove(key: string): Promise<void>;
}
