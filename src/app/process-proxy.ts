import type { Readable } from 'node:stream';
import { inject, injectable } from 'inversify';
import { InvalidArgumentError } from '../domain/errors.js';
import {
  assertProcessRef,
  isProcessId,
  parseFrom,
  parseProcessStart,
  parseSignal,
  termSize,
  type OutputFrame,
  type ProcessInfo,
} from '../domain/processes.js';
import { agentCursor, assertWatchId, parseCursor, type WatchEvent, type WatchInfo } from '../domain/watches.js';
import { FIRST_TIMELINE, formatCursor, formatFrom, isTimelineId, resumeOn, timelineOf } from '../domain/timeline.js';
import { GuestProcesses } from '../ports/guest-processes.js';
import { GuestProxy } from './guest-proxy.js';
import { Vms } from './vms.js';

/**
 * Durable processes and watches through the daemon (docs/processes.md): what a caller sends is
 * checked here (a bad body is a 400 that never reaches the guest), then handed to the guest's
 * agent, which keeps them. Nothing here ends a process when a caller leaves.
 */
@injectable()
export class ProcessProxy {
  constructor(
    @inject(GuestProxy) private readonly guest: GuestProxy,
    @inject(GuestProcesses) private readonly processes: GuestProcesses,
    @inject(Vms) private readonly vms: Vms,
  ) {}

  /** The timeline the VM's processes' offsets are on now (domain/timeline.ts). */
  timeline(vm: string): string {
    return timelineOf(this.vms.get(vm).timeline);
  }

  start(vm: string, body: unknown): Promise<ProcessInfo> {
    const req = parseProcessStart(body);
    return this.processes.start(this.guest.endpoint(vm), req);
  }

  async list(vm: string): Promise<ProcessInfo[]> {
    const timeline = this.timeline(vm);
    return (await this.processes.list(this.guest.endpoint(vm))).map((p) => ({ ...p, timeline }));
  }

  async get(vm: string, ref: string): Promise<ProcessInfo> {
    const timeline = this.timeline(vm);
    return { ...(await this.processes.get(this.guest.endpoint(vm), assertProcessRef(ref))), timeline };
  }

  /**
   * `from` as the API takes it (`N` or `stdout:N,stderr:M`) or `tail`, checked by the caller's
   * parseOutputStart. `timeline`: the one the reader's offsets are on; when the VM has left it (a
   * revert), the read starts no later than what the two share, and says so first.
   */
  async output(
    vm: string,
    ref: string,
    o: { from?: string; tail?: number; follow: boolean; timeline?: string },
    signal?: AbortSignal,
  ): Promise<AsyncIterable<OutputFrame>> {
    const { timeline: seen, ...read } = o;
    if (seen !== undefined && !isTimelineId(seen))
      throw new InvalidArgumentError('timeline must be what a process or an output answer named (t0, t1a2b...)');
    const ep = this.guest.endpoint(vm);
    const now = this.vms.get(vm).timeline;
    if (seen === undefined || read.tail !== undefined || seen === timelineOf(now))
      return this.processes.output(ep, assertProcessRef(ref), read, signal);
    // What a revert kept is noted by id: a tag is asked for the process it names.
    const id = isProcessId(ref) ? ref : (await this.processes.get(ep, assertProcessRef(ref))).id;
    const r = resumeOn(now, seen, id, parseFrom({ from: read.from }));
    const frames = await this.processes.output(ep, id, { ...read, from: formatFrom(r.from) }, signal);
    if (!r.reverted) return frames;
    const first: OutputFrame = { reverted: { timeline: timelineOf(now), from: r.reverted } };
    return (async function* () {
      yield first;
      yield* frames;
    })();
  }

  stdin(vm: string, ref: string, body: Readable, eof: boolean): Promise<void> {
    return this.processes.stdin(this.guest.endpoint(vm), assertProcessRef(ref), body, eof);
  }

  signal(vm: string, ref: string, signal: unknown): Promise<void> {
    return this.processes.signal(this.guest.endpoint(vm), assertProcessRef(ref), parseSignal(signal ?? 'SIGTERM'));
  }

  resize(vm: string, ref: string, body: unknown): Promise<void> {
    const b = (body ?? {}) as { cols?: unknown; rows?: unknown };
    if (b.cols === undefined || b.rows === undefined) throw new InvalidArgumentError('cols and rows are required');
    return this.processes.resize(
      this.guest.endpoint(vm),
      assertProcessRef(ref),
      termSize(b.cols, 'cols', 80),
      termSize(b.rows, 'rows', 24),
    );
  }

  remove(vm: string, ref: string): Promise<void> {
    return this.processes.remove(this.guest.endpoint(vm), assertProcessRef(ref));
  }

  /**
   * A watch's events, their cursors on the VM's timeline (`w3:1200@t1a2b...` after a revert). A
   * cursor of a timeline the VM has left reads on from no later than what the two share, and a
   * `reverted` event with that cursor comes first (as for output, "After a revert").
   */
  async watch(
    vm: string,
    o: { path?: string; recursive?: boolean; from?: string },
    signal?: AbortSignal,
  ): Promise<AsyncIterable<WatchEvent>> {
    const c = o.from ? parseCursor(o.from) : undefined;
    if (!c && !o.path)
      throw new InvalidArgumentError('path (what to watch) or from (a cursor to resume at) is required');
    if (!c && !o.path!.startsWith('/')) throw new InvalidArgumentError('path must be absolute');
    const now = this.vms.get(vm).timeline;
    const on = timelineOf(now);
    let first: WatchEvent | undefined;
    let from = o.from;
    if (c) {
      const r = resumeOn(now, c.timeline ?? FIRST_TIMELINE, c.watch, { stdout: c.offset });
      const at = r.from.stdout ?? c.offset;
      from = formatCursor(c.watch, at, undefined);
      if (r.reverted) first = { type: 'reverted', cursor: formatCursor(c.watch, at, on) };
    }
    const events = await this.processes.watch(this.guest.endpoint(vm), { ...o, from }, signal);
    return (async function* () {
      if (first) yield first;
      for await (const e of events) {
        const at = parseCursor(e.cursor);
        yield { ...e, cursor: formatCursor(at.watch, at.offset, on) };
      }
    })();
  }

  async watches(vm: string): Promise<WatchInfo[]> {
    const on = this.timeline(vm);
    return (await this.processes.watches(this.guest.endpoint(vm))).map(({ cursor, ...w }) => {
      // what an agent says is checked: a cursor that is not one is left out, not a 400 of the list
      const at = agentCursor(cursor);
      return at ? { ...w, cursor: formatCursor(at.watch, at.offset, on) } : w;
    });
  }

  removeWatch(vm: string, id: string): Promise<void> {
    return this.processes.removeWatch(this.guest.endpoint(vm), assertWatchId(id));
  }
}
