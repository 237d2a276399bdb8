import { isProcessId, type OutputOffsets, type ProcessInfo, type ProcessStream } from './processes.js';
import { agentCursor, isWatchId, type WatchInfo } from './watches.js';

/**
 * Each stream's bytes of each process, by id, as a snapshot found them just before it was taken:
 * below these offsets the guest a revert brings back wrote what the guest before it wrote.
 */
export type KeptOutput = Record<string, Partial<Record<ProcessStream, number>>>;

/**
 * Which history of its guest a VM is on (docs/processes.md, "After a revert"). A revert to a
 * snapshot brings back a guest whose processes' journals are at the snapshot's offsets and go on
 * from there with other bytes: offsets a reader saw before it name other bytes after it. Every
 * revert starts a new timeline; `before` is the one its snapshot was taken on and `kept` the bytes
 * of each process the two share.
 */
export interface VmTimeline {
  id: string;
  before?: string;
  kept?: KeptOutput;
}

/** The timeline of a VM that was never reverted. */
export const FIRST_TIMELINE = 't0';
/** The most processes (and watches) a snapshot notes the bytes of (the newest): the others are read again from 0. */
export const MAX_KEPT_PROCESSES = 64;

const STREAMS: ProcessStream[] = ['stdout', 'stderr', 'pty'];
const TIMELINE_RE = /^t[0-9a-f]{1,24}$/;

export function timelineOf(t: VmTimeline | undefined): string {
  return t?.id ?? FIRST_TIMELINE;
}

export function isTimelineId(s: string): boolean {
  return TIMELINE_RE.test(s);
}

/**
 * The timeline a revert to a snapshot starts (`random`: 12 hex digits). What it shares is with the
 * timeline the snapshot was taken on (`taken_on`), below the bytes the snapshot noted: not with the
 * one the VM leaves, which may have gone back to an older snapshot since and written other bytes.
 */
export function revertedTimeline(
  taken_on: string | undefined,
  kept: KeptOutput | undefined,
  random: string,
): VmTimeline {
  return { id: `t${random}`, before: taken_on ?? FIRST_TIMELINE, ...(kept ? { kept } : {}) };
}

/**
 * What a snapshot notes of the processes and watches a guest lists just before it is taken: each
 * process's bytes, and each watch's journal as the `stdout` of its id (a watch is a process whose
 * output is its events, docs/processes.md); the newest MAX_KEPT_PROCESSES of each.
 */
export function keptOutputOf(list: ProcessInfo[], watches: WatchInfo[] = []): KeptOutput | undefined {
  const kept: KeptOutput = {};
  const newest = <T extends { id: string }>(xs: T[]) =>
    [...xs].sort((a, b) => Number(b.id.slice(1)) - Number(a.id.slice(1))).slice(0, MAX_KEPT_PROCESSES);
  for (const p of newest(list)) if (Object.keys(p.bytes).length) kept[p.id] = { ...p.bytes };
  for (const w of newest(watches)) {
    const c = agentCursor(w.cursor);
    if (c?.watch === w.id) kept[w.id] = { stdout: c.offset };
  }
  return Object.keys(kept).length ? kept : undefined;
}

/**
 * Where a reader that read up to `from` on timeline `seen` reads on, now that the VM is on `now`:
 * where it is now, when that is the timeline it read on (or it names none); else each stream from
 * no further than the bytes the two timelines share (nothing, unless `seen` is the one the last
 * revert's snapshot was taken on), and `reverted` says the offsets it was moved back to.
 */
export function resumeOn(
  now: VmTimeline | undefined,
  seen: string | undefined,
  process: string,
  from: OutputOffsets,
): { from: OutputOffsets; reverted?: OutputOffsets } {
  if (seen === undefined || seen === timelineOf(now)) return { from };
  const shared = seen === now?.before ? (now.kept?.[process] ?? {}) : {};
  const at = (s: ProcessStream) => from[s] ?? from.all ?? 0;
  // A process's noted bytes name each of its streams; a `from` names those it reads apart.
  const named = STREAMS.filter((s) => from[s] !== undefined || shared[s] !== undefined);
  if (!named.length) return (from.all ?? 0) > 0 ? { from: { all: 0 }, reverted: { all: 0 } } : { from };
  const next: OutputOffsets = {};
  const reverted: OutputOffsets = {};
  for (const s of named) {
    next[s] = Math.min(at(s), shared[s] ?? 0);
    if (next[s]! < at(s)) reverted[s] = next[s];
  }
  return Object.keys(reverted).length ? { from: next, reverted } : { from };
}

/**
 * A reader's offsets after a `reverted` frame: each stream it names is moved to its offset; `all`
 * (every stream from one offset) forgets the streams' own. Changes `pos`; answers the new `all`.
 */
export function movedBack(
  pos: Partial<Record<ProcessStream, number>>,
  all: number | undefined,
  from: OutputOffsets,
): number | undefined {
  const { all: every, ...streams } = from;
  if (every !== undefined) for (const s of Object.keys(pos)) delete pos[s as ProcessStream];
  Object.assign(pos, streams);
  return every ?? all;
}

/** The cursor of a watch's offset on a timeline (parseCursor's syntax): the first is not said. */
export function formatCursor(watch: string, offset: number, timeline: string | undefined): string {
  return timeline && timeline !== FIRST_TIMELINE ? `${watch}:${offset}@${timeline}` : `${watch}:${offset}`;
}

/** The `from` of an output read as the agent takes it. */
export function formatFrom(from: OutputOffsets): string | undefined {
  const parts = STREAMS.filter((s) => from[s] !== undefined).map((s) => `${s}:${from[s]}`);
  if (parts.length) return parts.join(',');
  return from.all !== undefined ? String(from.all) : undefined;
}

/** A timeline from a peer (a move): kept when well formed, else none (its readers then read again). */
export function offeredTimeline(t: unknown): VmTimeline | undefined {
  const o = t as Partial<VmTimeline> | null | undefined;
  if (!o || typeof o.id !== 'string' || !isTimelineId(o.id)) return undefined;
  if (o.before !== undefined && (typeof o.before !== 'string' || !isTimelineId(o.before))) return { id: o.id };
  const kept = offeredKept(o.kept);
  return { id: o.id, ...(o.before ? { before: o.before } : {}), ...(kept ? { kept } : {}) };
}

/** Noted bytes from a peer: at most MAX_KEPT_PROCESSES process and watch ids each, whole offsets of known streams. */
export function offeredKept(k: unknown): KeptOutput | undefined {
  if (!k || typeof k !== 'object' || Array.isArray(k)) return undefined;
  const entries = Object.entries(k as Record<string, unknown>);
  const processes = entries.filter(([id]) => isProcessId(id)).length;
  const watches = entries.filter(([id]) => isWatchId(id)).length;
  if (processes + watches !== entries.length || Math.max(processes, watches) > MAX_KEPT_PROCESSES) return undefined;
  const ok = entries.every(
    ([, b]) =>
      !!b &&
      typeof b === 'object' &&
      Object.entries(b as Record<string, unknown>).every(
        ([s, n]) => STREAMS.includes(s as ProcessStream) && Number.isSafeInteger(n) && (n as number) >= 0,
      ),
  );
  return ok ? (k as KeptOutput) : undefined;
}
