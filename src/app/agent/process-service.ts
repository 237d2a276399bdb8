import type { Readable } from 'node:stream';
import { inject, injectable } from 'inversify';
import {
  AlreadyExistsError,
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
  NotSupportedError,
} from '../../domain/errors.js';
import {
  assertProcessRef,
  isProcessId,
  parseSignal,
  PIECE_MAX_BYTES,
  signalName,
  type OutputPiece,
  type OutputStart,
  type ProcessInfo,
  type ProcessStart,
  type ProcessStream,
} from '../../domain/processes.js';
import { GuestFiles } from '../../ports/agent/guest-files.js';
import { GuestUsers, KeptProcesses, type KeptEnd, type KeptRecord } from '../../ports/agent/kept-processes.js';
import { SpawnError } from '../../ports/agent/process-runner.js';
import { AgentOptions } from './agent-options.js';
import { AgentService } from './agent-service.js';
import { tailStart } from './journal-tail.js';

/**
 * Bytes of one piece of output read from a journal, at most: large, for fewer turns of the agent's
 * loop under TCG (frames to clients are cut to 64 KiB after, output-pieces.ts). 1 MiB measured no
 * better for a live follow in three runs (docs/benchmarks.md, 2026-11-28)...
 */
export const PIECE_BYTES = 256 * 1024;
/**
 * ...but once the process has ended, all of its output is there to read, and a piece costs the
 * agent about as much whatever its size: 1 MiB read a finished 12 MiB in 420-470 ms in the guest
 * against 630-680 ms (docs/benchmarks.md, 2026-11-29): the largest piece the daemon takes.
 */
export const ENDED_PIECE_BYTES = PIECE_MAX_BYTES;
/** How long a follower waits for news before it looks again anyway. */
const FOLLOW_POLL_MS = 1000;
/** Ended processes kept to be listed and read, the newest (up to 31 more between prunes); older ones are removed as new ones start. */
export const KEEP_ENDED = 256;

/**
 * Durable processes (docs/processes.md): started through a keeper that outlives this agent, their
 * output journaled with byte offsets per stream, read from any offset and followed.
 */
@injectable()
export class ProcessService {
  constructor(
    @inject(KeptProcesses) private readonly kept: KeptProcesses,
    @inject(GuestUsers) private readonly users: GuestUsers,
    @inject(GuestFiles) private readonly files: GuestFiles,
    @inject(AgentService) private readonly agent: AgentService,
    @inject(AgentOptions) private readonly opts: AgentOptions,
  ) {}

  private available(): void {
    const why = this.kept.unavailable();
    if (why) throw new NotSupportedError(why);
  }

  async start(req: ProcessStart): Promise<ProcessInfo> {
    this.available();
    if (req.tag) {
      const running = await this.running();
      if (running.some((p) => p.tag === req.tag))
        throw new AlreadyExistsError(`a running process already has tag ${req.tag}`);
    }
    if (req.cwd && (await this.files.stat(req.cwd).catch(() => null))?.type !== 'directory')
      throw new InvalidArgumentError(`cwd ${req.cwd} is not a directory`);
    const user = req.user ? await this.users.find(req.user) : null;
    if (req.user && !user) throw new InvalidArgumentError(`no user ${req.user} in the guest`);
    const env: Record<string, string> = { TERM: req.pty ? 'xterm-256color' : 'dumb' };
    if (user) Object.assign(env, { HOME: user.home, USER: user.name, LOGNAME: user.name, SHELL: user.shell });
    Object.assign(env, req.env ?? {});
    // A user's home that is not there (nobody's /nonexistent) is no place to start: then /.
    let cwd = req.cwd;
    if (!cwd && user)
      cwd = (await this.files.stat(user.home).catch(() => null))?.type === 'directory' ? user.home : '/';
    await this.prune();
    let rec: KeptRecord;
    try {
      rec = await this.kept.start({
        kind: 'process',
        cmd: req.cmd,
        args: req.args,
        env,
        cwd,
        stdin: !!req.stdin,
        pty: req.pty,
        uid: user?.uid,
        gid: user?.gid,
        groups: user?.groups,
        tag: req.tag,
        restart: req.restart ? { policy: req.restart, max: req.max_restarts } : undefined,
        host: await this.agent.hostname(),
        capBytes: this.opts.journalBytes,
      });
    } catch (err) {
      if (err instanceof SpawnError) throw new InvalidArgumentError(err.message);
      throw err;
    }
    return this.info(rec, null, rec.host);
  }

  /** Every kept process, oldest first, running or ended (the newest KEEP_ENDED of those). */
  async list(): Promise<ProcessInfo[]> {
    this.available();
    const host = await this.agent.hostname();
    const recs = await this.kept.list('process');
    return Promise.all(recs.map(async (r) => this.info(r, await this.kept.end(r.id), host)));
  }

  /** By id, or by tag: the running process with it, else the newest that had it. */
  async get(ref: string): Promise<ProcessInfo> {
    const rec = await this.find(ref);
    return this.info(rec, await this.kept.end(rec.id), await this.agent.hostname());
  }

  private async find(ref: string): Promise<KeptRecord> {
    this.available();
    assertProcessRef(ref);
    if (isProcessId(ref)) {
      const rec = await this.kept.get(ref);
      if (!rec) throw new NotFoundError(`no process ${ref}`);
      return rec;
    }
    const tagged = (await this.kept.list('process')).filter((r) => r.tag === ref).reverse();
    for (const r of tagged) if (!(await this.kept.end(r.id))) return r;
    if (!tagged.length) throw new NotFoundError(`no process tagged ${ref}`);
    return tagged[0];
  }

  private async running(): Promise<KeptRecord[]> {
    const out: KeptRecord[] = [];
    for (const r of await this.kept.list('process')) if (!(await this.kept.end(r.id))) out.push(r);
    return out;
  }

  private startsSincePrune = 0;

  /** Removes the oldest ended processes past KEEP_ENDED (looked at every 32 starts: a listing reads them all). */
  private async prune(): Promise<void> {
    if (++this.startsSincePrune < 32) return;
    this.startsSincePrune = 0;
    const ended: KeptRecord[] = [];
    for (const r of await this.kept.list('process')) if (await this.kept.end(r.id)) ended.push(r);
    for (const r of ended.slice(0, Math.max(0, ended.length - KEEP_ENDED + 1))) await this.kept.remove(r.id);
  }

  private async info(r: KeptRecord, end: KeptEnd | null, host: string): Promise<ProcessInfo> {
    const bytes: ProcessInfo['bytes'] = {};
    for (const s of streamsOf(r)) bytes[s] = (await this.kept.range(r.id, s)).end;
    const out: ProcessInfo = {
      bytes,
      id: r.id,
      pid: r.pid,
      cmd: r.cmd,
      args: r.args,
      pty: r.pty,
      stdin: r.stdin,
      started_at: r.started_at,
      state: end ? 'ended' : 'running',
    };
    if (r.tag) out.tag = r.tag;
    if (r.host !== host) out.started_in = r.host;
    const run = r.restart ? await this.kept.run(r.id) : null;
    if (r.restart && run) {
      if (run.pid) out.pid = run.pid;
      Object.assign(out, { restart: r.restart.policy, restarts: run.restarts });
      if (r.restart.max !== undefined) out.max_restarts = r.restart.max;
    }
    if (end) Object.assign(out, endFields(end));
    return out;
  }

  /**
   * The output from `start.from` (per stream; 0 when not given), or from the start of each
   * stream's last `start.tail` lines (told first, as a `start` line): each stream's bytes in pieces
   * of at most PIECE_BYTES (whole UTF-8 characters where they are text; encoding them into frames
   * is the caller's), a `truncated` line where bytes are no longer kept, and, once the process has
   * ended and its output is all read, its end. Without `follow` it stops at what is there now.
   */
  async output(
    ref: string,
    start: OutputStart,
    follow: boolean,
    signal?: AbortSignal,
  ): Promise<AsyncIterable<OutputPiece>> {
    const { from, tail } = start;
    const rec = await this.find(ref);
    const streams = streamsOf(rec);
    for (const s of Object.keys(from)) {
      if (s !== 'all' && !streams.includes(s as ProcessStream))
        throw new InvalidArgumentError(`process ${rec.id} has no stream ${s}`);
    }
    const pos = {} as Record<ProcessStream, number>;
    for (const s of streams) {
      const r = await this.kept.range(rec.id, s);
      if (tail !== undefined) {
        const reader = this.kept.reader(rec.id, s);
        pos[s] = await tailStart(reader, r, tail).finally(() => reader.close());
        continue;
      }
      pos[s] = from[s] ?? from.all ?? 0;
      if (pos[s] > r.end && (await this.kept.end(rec.id)))
        throw new InvalidArgumentError(`from ${s}:${pos[s]} is past the end of its output (${r.end})`);
    }
    return this.frames(rec, streams, pos, follow, signal, tail !== undefined);
  }

  private async *frames(
    rec: KeptRecord,
    streams: ProcessStream[],
    pos: Record<ProcessStream, number>,
    follow: boolean,
    signal: AbortSignal | undefined,
    sayStart: boolean,
  ): AsyncGenerator<OutputPiece> {
    if (sayStart) yield { start: { ...pos } };
    const readers = new Map(streams.map((s) => [s, this.kept.reader(rec.id, s)] as const));
    try {
      // Looked at before reading: an end seen means every byte was written before the reads after
      // it. While the reads find bytes it is not looked at again, only once they find none: a look
      // is two files and two of /proc read, and under TCG it was a piece's cost again.
      let end = await this.kept.end(rec.id);
      // Bytes at a stream's position that are only the start of a character, held back until its
      // rest comes: the wait below is for bytes after them, or it would wake at once, again and again.
      const held = {} as Record<ProcessStream, number>;
      while (!signal?.aborted) {
        const piece = end ? ENDED_PIECE_BYTES : PIECE_BYTES;
        let progressed = false;
        for (const [s, reader] of readers) {
          for (;;) {
            const r = await reader.read(pos[s], piece);
            if (r.offset > pos[s]) {
              yield { truncated: { stream: s, before: r.offset } };
              pos[s] = r.offset;
            }
            const used = r.data.length ? wholeCharacters(r.data, !!end) : 0;
            held[s] = used ? 0 : r.data.length;
            if (!used) break; // nothing, or only part of a character so far
            yield { stream: s, offset: r.offset, bytes: r.data.subarray(0, used) };
            pos[s] += used;
            progressed = true;
            if (r.data.length < piece) break;
          }
        }
        if (progressed) continue;
        if (end) {
          yield { ...endFields(end), ended_at: new Date(end.ended_at_ms).toISOString() } as OutputPiece;
          return;
        }
        // Caught up with a process not known to have ended: has it? Then one more round of reads.
        end = await this.kept.end(rec.id);
        if (end) continue;
        if (!follow) return;
        const moved = async () => {
          for (const [s, reader] of readers)
            if ((await reader.read(pos[s] + (held[s] ?? 0), 1)).data.length) return true;
          return !!(await this.kept.end(rec.id));
        };
        await this.kept.changed(rec.id, FOLLOW_POLL_MS, signal, moved);
      }
    } finally {
      for (const reader of readers.values()) await reader.close();
    }
  }

  async stdin(ref: string, body: Readable, eof: boolean): Promise<void> {
    const found = await this.find(ref);
    if (!found.stdin) throw new InvalidStateError(`process ${found.id} was started without stdin: true`);
    const rec = await this.live(ref);
    await this.kept.stdin(rec.id, body);
    if (eof) await this.kept.control(rec.id, 'eof');
  }

  async signal(ref: string, sig: unknown): Promise<void> {
    const rec = await this.live(ref);
    await this.kept.signal(rec.id, parseSignal(sig));
  }

  async resize(ref: string, cols: number, rows: number): Promise<void> {
    const rec = await this.live(ref);
    if (!rec.pty) throw new InvalidStateError(`process ${rec.id} has no terminal`);
    await this.kept.control(rec.id, `resize ${cols} ${rows}`);
  }

  /** Kills it when it runs, and forgets it. */
  async remove(ref: string): Promise<void> {
    const rec = await this.find(ref);
    await this.kept.remove(rec.id);
  }

  private async live(ref: string): Promise<KeptRecord> {
    const rec = await this.find(ref);
    if (await this.kept.end(rec.id)) throw new InvalidStateError(`process ${rec.id} has ended`);
    return rec;
  }
}

function streamsOf(r: KeptRecord): ProcessStream[] {
  return r.pty ? ['pty'] : ['stdout', 'stderr'];
}

function endFields(e: KeptEnd): Pick<ProcessInfo, 'exit_code' | 'signal' | 'reason' | 'ended_at'> {
  const ended_at = new Date(e.ended_at_ms).toISOString();
  if (e.reason) return { reason: e.reason, ended_at };
  if (e.signal !== undefined)
    return { reason: 'signal', signal: signalName(e.signal), exit_code: 128 + e.signal, ended_at };
  return { reason: 'exit', exit_code: e.code ?? 0, ended_at };
}

/**
 * How many of `data`'s bytes to send now: all but a UTF-8 character cut at the end (it waits for
 * its rest, unless the process has ended). 0 when nothing whole is there yet. Bytes that are not
 * UTF-8 at all go whole, except a last few that look like the start of a character.
 */
export function wholeCharacters(data: Uint8Array, ended: boolean): number {
  let cut = data.length;
  // A UTF-8 sequence's lead byte is 11xxxxxx; back up over a last sequence that is not complete.
  for (let i = data.length - 1; i >= Math.max(0, data.length - 4); i--) {
    const b = data[i];
    if ((b & 0xc0) === 0x80) continue;
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    if (data.length - i < need) cut = i;
    break;
  }
  if (cut > 0) return cut;
  return !ended && data.length < 4 ? 0 : data.length;
}
