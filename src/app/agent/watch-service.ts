import { inject, injectable } from 'inversify';
import {
  DeadlineExceededError,
  InternalError,
  InvalidArgumentError,
  NotFoundError,
  NotSupportedError,
  ResourceExhaustedError,
} from '../../domain/errors.js';
import { assertWatchId, parseCursor, type WatchEvent, type WatchInfo } from '../../domain/watches.js';
import { GuestFiles } from '../../ports/agent/guest-files.js';
import { KeptProcesses, type KeptRecord } from '../../ports/agent/kept-processes.js';
import { AgentService } from './agent-service.js';

/** Bytes of events kept per watch; past it the oldest go, and a reader behind them is told `overflow`. */
export const WATCH_JOURNAL_BYTES = 4 << 20;
/** Watches running at once (each is a svc-watch process and its inotify watches). */
export const MAX_WATCHES = 64;
const READ_BYTES = 64 * 1024;
const FOLLOW_POLL_MS = 1000;
/** svc-watch's first line, once its watches are in place (native/svc-watch.c). */
const READY_LINE = '{"type":"ready"}\n';
/** How long a new watch may take to put its watches in place (a recursive one walks its tree). */
const READY_WAIT_MS = 60_000;

/**
 * File watches you can resume (docs/processes.md): svc-watch, run under the keeper like a durable
 * process, turns inotify's events into lines that the keeper journals; a cursor is a watch's id
 * and a byte offset into that journal, so a reader that comes back with the last cursor it saw
 * gets the next event, from any agent, after any disconnect.
 */
@injectable()
export class WatchService {
  constructor(
    @inject(KeptProcesses) private readonly kept: KeptProcesses,
    @inject(GuestFiles) private readonly files: GuestFiles,
    @inject(AgentService) private readonly agent: AgentService,
  ) {}

  private available(): void {
    const why = this.kept.unavailable();
    if (why) throw new NotSupportedError(why);
  }

  /** Starts watching `path` (a file or directory; `recursive` for the tree under a directory). */
  async create(path: string, recursive: boolean): Promise<WatchInfo> {
    this.available();
    if (!path.startsWith('/')) throw new InvalidArgumentError('path must be absolute');
    await this.files.stat(path); // NotFound for a path that is not there
    const recs = await this.kept.list('watch');
    const running: KeptRecord[] = [];
    const ended: KeptRecord[] = [];
    for (const r of recs) ((await this.kept.end(r.id)) ? ended : running).push(r);
    if (running.length >= MAX_WATCHES)
      throw new ResourceExhaustedError(`${MAX_WATCHES} watches run already; delete one (DELETE /watches/{id})`);
    for (const r of ended.slice(0, Math.max(0, ended.length - MAX_WATCHES + 1))) await this.kept.remove(r.id);
    const rec = await this.kept.start({
      kind: 'watch',
      cmd: 'svc-watch',
      args: [...(recursive ? ['--recursive'] : []), path],
      env: {},
      stdin: false,
      host: await this.agent.hostname(),
      watch: { path, recursive },
      capBytes: WATCH_JOURNAL_BYTES,
    });
    try {
      await this.ready(rec.id);
    } catch (err) {
      await this.kept.remove(rec.id);
      throw err;
    }
    return this.info(rec, false, 0);
  }

  /**
   * Waits for a new watch's svc-watch to say its watches are in place: said to have begun before
   * that, a write right after could come before inotify looks (a clean-clone CI run missed one,
   * 2026-12-03). One that ends first fails with what it said.
   */
  private async ready(id: string): Promise<void> {
    const out = this.kept.reader(id, 'stdout');
    const deadline = Date.now() + READY_WAIT_MS;
    try {
      for (;;) {
        const got = (await out.read(0, READY_LINE.length)).data;
        if (got.length === READY_LINE.length) {
          if (got.toString('utf8') === READY_LINE) return;
          throw new InternalError(`the watch began with ${JSON.stringify(got.toString('utf8'))}, not ready`);
        }
        if (await this.kept.end(id)) {
          const err = this.kept.reader(id, 'stderr');
          const said = (await err.read(0, 1024)).data.toString('utf8').trim();
          await err.close();
          throw new InternalError(said || 'the watch ended before it was in place');
        }
        if (Date.now() > deadline)
          throw new DeadlineExceededError(`the watch was not in place after ${READY_WAIT_MS / 1000} s`);
        await this.kept.changed(
          id,
          FOLLOW_POLL_MS,
          undefined,
          async () => (await out.read(0, READY_LINE.length)).data.length > got.length || !!(await this.kept.end(id)),
        );
      }
    } finally {
      await out.close();
    }
  }

  async list(): Promise<WatchInfo[]> {
    this.available();
    const recs = await this.kept.list('watch');
    return Promise.all(
      recs.map(async (r) => this.info(r, !!(await this.kept.end(r.id)), (await this.kept.range(r.id, 'stdout')).end)),
    );
  }

  async remove(id: string): Promise<void> {
    this.available();
    await this.need(assertWatchId(id));
    await this.kept.remove(id);
  }

  private async need(id: string): Promise<KeptRecord> {
    const rec = await this.kept.get(id);
    if (!rec || rec.kind !== 'watch') throw new NotFoundError(`no watch ${id}`);
    return rec;
  }

  /** `end`: where its journal ends, the cursor of the events to come. */
  private info(r: KeptRecord, ended: boolean, end: number): WatchInfo {
    return {
      id: r.id,
      path: r.watch?.path ?? '',
      recursive: !!r.watch?.recursive,
      started_at: r.started_at,
      state: ended ? 'ended' : 'running',
      cursor: `${r.id}:${end}`,
    };
  }

  /**
   * A watch's events from a cursor (`w3:1200`), or a new watch's from its start, first saying
   * `watching` with its id and cursor. It follows until the caller leaves, or the watch ends (its
   * path was removed, or DELETE) and its events are read.
   */
  async events(
    o: { cursor?: string; path?: string; recursive?: boolean },
    signal?: AbortSignal,
  ): Promise<AsyncIterable<WatchEvent>> {
    this.available();
    let id: string;
    let pos: number;
    let first: WatchEvent | undefined;
    if (o.cursor) {
      const c = parseCursor(o.cursor);
      if (c.timeline) throw new InvalidArgumentError(`cursor ${o.cursor}: its timeline is the daemon's to read`);
      const rec = await this.need(c.watch);
      if (o.path && o.path !== rec.watch?.path)
        throw new InvalidArgumentError(`cursor ${o.cursor} is of a watch on ${rec.watch?.path}, not ${o.path}`);
      const r = await this.kept.range(c.watch, 'stdout');
      if (c.offset > r.end)
        throw new InvalidArgumentError(`cursor ${o.cursor} is past the end of its watch (${c.watch}:${r.end})`);
      id = c.watch;
      pos = c.offset;
    } else {
      if (!o.path) throw new InvalidArgumentError('path or from (a cursor) is required');
      const w = await this.create(o.path, !!o.recursive);
      id = w.id;
      pos = 0;
      first = { type: 'watching', cursor: `${id}:0`, watch: id, path: w.path, recursive: w.recursive };
    }
    return this.follow(id, pos, first, signal);
  }

  private async *follow(
    id: string,
    pos: number,
    first: WatchEvent | undefined,
    signal?: AbortSignal,
  ): AsyncGenerator<WatchEvent> {
    if (first) yield first;
    const reader = this.kept.reader(id, 'stdout');
    try {
      while (!signal?.aborted) {
        const ended = await this.kept.end(id);
        const r = await reader.read(pos, READ_BYTES);
        if (r.offset > pos) {
          pos = r.offset;
          yield { type: 'overflow', cursor: `${id}:${pos}` };
        }
        const last = r.data.lastIndexOf(10);
        if (last >= 0) {
          let at = pos;
          for (const line of r.data
            .subarray(0, last + 1)
            .toString('utf8')
            .split('\n')
            .slice(0, -1)) {
            at += Buffer.byteLength(line) + 1;
            const ev = parseEvent(line);
            if (ev) yield { ...ev, cursor: `${id}:${at}` };
          }
          pos += last + 1;
          continue;
        }
        if (r.data.length >= READ_BYTES) {
          // a line longer than any svc-watch writes: skipped, and said
          pos += r.data.length;
          yield { type: 'overflow', cursor: `${id}:${pos}` };
          continue;
        }
        if (ended) return;
        const seen = pos + r.data.length; // a line not yet whole included
        await this.kept.changed(
          id,
          FOLLOW_POLL_MS,
          signal,
          async () => (await reader.read(seen, 1)).data.length > 0 || !!(await this.kept.end(id)),
        );
      }
    } finally {
      await reader.close();
    }
  }
}

const TYPES = new Set(['create', 'write', 'remove', 'rename', 'chmod', 'overflow']);

/** One of svc-watch's lines, checked; null for anything else. */
function parseEvent(line: string): Omit<WatchEvent, 'cursor'> | null {
  try {
    const v = JSON.parse(line) as Record<string, unknown>;
    if (typeof v.type !== 'string' || !TYPES.has(v.type)) return null;
    const ev: Omit<WatchEvent, 'cursor'> = { type: v.type as WatchEvent['type'] };
    if (typeof v.path === 'string') ev.path = v.path;
    if (typeof v.to === 'string') ev.to = v.to;
    if (v.entry && typeof v.entry === 'object') ev.entry = v.entry as WatchEvent['entry'];
    return ev;
  } catch {
    return null;
  }
}
