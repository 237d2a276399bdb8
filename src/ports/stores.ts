import type { VmRecord } from '../domain/vm.js';
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
   * The last `tail` bytes (all when omitted), then, with `follow`, what is appended until `signal`
   * aborts. An absent log reads as empty.
   */
  read(vm: string, opts: { tail?: number; follow?: boolean; signal?: AbortSignal }): AsyncIterable<Buffer>;
}
