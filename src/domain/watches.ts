import { InvalidArgumentError } from './errors.js';

/**
 * File watches (docs/processes.md): the events a watch reads, its ids and its cursors, shared by the
 * agent, the daemon and the client.
 */

export type WatchEventType = 'create' | 'write' | 'remove' | 'rename' | 'chmod' | 'overflow' | 'watching' | 'reverted';

export interface WatchEntry {
  type: 'file' | 'directory' | 'symlink' | 'other';
  size: number;
  mode: string;
}

/** One line of GET .../watch. The first line of a new watch is `watching` (its id and first cursor). */
export interface WatchEvent {
  cursor: string;
  type: WatchEventType;
  path?: string;
  to?: string;
  entry?: WatchEntry;
  watch?: string;
  recursive?: boolean;
}

export interface WatchInfo {
  id: string;
  path: string;
  recursive: boolean;
  started_at: string;
  state: 'running' | 'ended';
  /** Where its journal ends now: a reader that wants only the events to come resumes there. */
  cursor?: string;
}

/** A watch id, `w` and a number the agent gives (never reused within a VM's life). */
const ID_PART = 'w[1-9][0-9]{0,15}';
const ID = new RegExp(`^${ID_PART}$`);

export function isWatchId(s: string): boolean {
  return ID.test(s);
}

export function assertWatchId(s: string): string {
  if (!isWatchId(s)) throw new InvalidArgumentError(`${JSON.stringify(s)} is not a watch id`);
  return s;
}

const CURSOR = new RegExp(`^(${ID_PART}):(\\d{1,15})(?:@(t[0-9a-f]{1,24}))?$`);

/**
 * A watch cursor `w3:1200`: the watch and the byte offset of its journal to read on from; after a
 * revert the daemon says the timeline it is on too, `w3:1200@t1a2b...` (docs/processes.md).
 */
export function parseCursor(s: string): { watch: string; offset: number; timeline?: string } {
  const m = CURSOR.exec(s);
  if (!m) throw new InvalidArgumentError(`cursor ${JSON.stringify(s)} is not valid (w3:1200)`);
  return { watch: m[1], offset: Number(m[2]), ...(m[3] ? { timeline: m[3] } : {}) };
}

/**
 * A cursor as an agent says it (no timeline: an agent knows none; the daemon adds it), read from
 * what an agent sent; undefined for anything else.
 */
export function agentCursor(s: unknown): { watch: string; offset: number } | undefined {
  const m = typeof s === 'string' ? CURSOR.exec(s) : null;
  return m && !m[3] ? { watch: m[1], offset: Number(m[2]) } : undefined;
}
