import type { Readable } from 'node:stream';
import type { OutputFrame, ProcessInfo, ProcessStart } from '../domain/processes.js';
import type { WatchEvent, WatchInfo } from '../domain/watches.js';
import type { AgentEndpoint } from './guest-agent.js';

export const GuestProcesses = Symbol('GuestProcesses');
/**
 * Durable processes and file watches in a guest (docs/processes.md), as its agent keeps them:
 * they belong to the guest, not to the call, so nothing here ends one when a caller leaves.
 * Errors as GuestAgent's: AgentUnavailable, AgentFailure (garbage or 5xx, and any line that is
 * not a frame), the agent's 400/404/409 passed through; NotSupported where the guest has none.
 * `ref` is a process id (`p3`) or tag.
 */
export interface GuestProcesses {
  start(ep: AgentEndpoint, req: ProcessStart): Promise<ProcessInfo>;
  list(ep: AgentEndpoint): Promise<ProcessInfo[]>;
  get(ep: AgentEndpoint, ref: string): Promise<ProcessInfo>;
  /**
   * Output frames from `from` (the agent's syntax: `N` or `stdout:N,stderr:M`) or, with `tail`,
   * from each stream's last lines (a `start` frame first), following while `follow`; `signal`
   * (the caller left) ends the reading, not the process. An agent too old to know `tail` is a
   * NotSupported, never a read from 0.
   */
  output(
    ep: AgentEndpoint,
    ref: string,
    o: { from?: string; tail?: number; follow: boolean },
    signal?: AbortSignal,
  ): Promise<AsyncIterable<OutputFrame>>;
  stdin(ep: AgentEndpoint, ref: string, body: Readable, eof: boolean): Promise<void>;
  signal(ep: AgentEndpoint, ref: string, signal: string): Promise<void>;
  resize(ep: AgentEndpoint, ref: string, cols: number, rows: number): Promise<void>;
  /** Kills it if it runs and forgets it. */
  remove(ep: AgentEndpoint, ref: string): Promise<void>;
  /** A watch's events: a new one on `path`, or an existing one from `from` (a cursor). */
  watch(
    ep: AgentEndpoint,
    o: { path?: string; recursive?: boolean; from?: string },
    signal?: AbortSignal,
  ): Promise<AsyncIterable<WatchEvent>>;
  watches(ep: AgentEndpoint): Promise<WatchInfo[]>;
  removeWatch(ep: AgentEndpoint, id: string): Promise<void>;
}
