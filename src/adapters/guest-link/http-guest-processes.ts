import type { ClientRequest, IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import {
  PIECE_MAX_BYTES,
  type OutputFrame,
  type ProcessInfo,
  type ProcessStart,
  type ProcessStream,
} from '../../domain/processes.js';
import { agentCursor, type WatchEvent, type WatchInfo } from '../../domain/watches.js';
import type { AgentEndpoint } from '../../ports/guest-agent.js';
import type { GuestProcesses } from '../../ports/guest-processes.js';
import { AgentHttp, linesOf } from './agent-http.js';
import { AgentFailureError, NotSupportedError } from '../../domain/errors.js';
import { REPLY_LIMITS, where } from './agent-replies.js';
import { BadPieces, encodeFrames, PIECES_TYPE, readPieces } from '../http-kit/output-pieces.js';

/** A process's journal frame is at most 64 KiB of bytes; base64 and JSON make that under 100 KiB. */
const LINE_MAX = 256 * 1024;
/** An unencoded piece's head is a short JSON line (its bytes: at most PIECE_MAX_BYTES). */
const PIECE_HEAD_MAX = 1024;
const CALL_TIMEOUT_MS = 30_000;

const json = (v: unknown) => ({ body: Buffer.from(JSON.stringify(v)), contentType: 'application/json' });
const p = (ref: string) => `/processes/${encodeURIComponent(ref)}`;

/** The GuestProcesses port over the agent's HTTP (docs/processes.md), on the connections HttpGuestAgent keeps. */
export class HttpGuestProcesses implements GuestProcesses {
  constructor(private readonly http: AgentHttp) {}

  start(ep: AgentEndpoint, req: ProcessStart): Promise<ProcessInfo> {
    return this.http.json(ep, { method: 'POST', path: '/processes', ...json(req), timeoutMs: CALL_TIMEOUT_MS });
  }

  list(ep: AgentEndpoint): Promise<ProcessInfo[]> {
    return this.http.json(ep, {
      method: 'GET',
      path: '/processes',
      timeoutMs: CALL_TIMEOUT_MS,
      maxBytes: REPLY_LIMITS.exec,
    });
  }

  get(ep: AgentEndpoint, ref: string): Promise<ProcessInfo> {
    return this.http.json(ep, { method: 'GET', path: p(ref), timeoutMs: CALL_TIMEOUT_MS });
  }

  /** Asks for the output unencoded (output-pieces.ts) and makes the frames here; an agent that sends NDJSON is read as such. */
  async output(
    ep: AgentEndpoint,
    ref: string,
    o: { from?: string; tail?: number; follow: boolean },
    signal?: AbortSignal,
  ): Promise<AsyncIterable<OutputFrame>> {
    const q = new URLSearchParams({ follow: o.follow ? '1' : '0', raw: '1' });
    if (o.from) q.set('from', o.from);
    if (o.tail !== undefined) q.set('tail', String(o.tail));
    const answer = await this.http.open(ep, { method: 'GET', path: `${p(ref)}/output?${q}`, signal });
    const frames = String(answer.res.headers['content-type'] ?? '').startsWith(PIECES_TYPE)
      ? framesOfPieces(answer, ep)
      : linesOf(answer, LINE_MAX, isOutputFrame);
    return o.tail === undefined ? frames : startedAtTail(frames, () => answer.req.destroy());
  }

  async stdin(ep: AgentEndpoint, ref: string, body: Readable, eof: boolean): Promise<void> {
    await this.http.json(ep, {
      method: 'POST',
      path: `${p(ref)}/stdin?eof=${eof ? 1 : 0}`,
      body,
      contentType: 'application/octet-stream',
    });
  }

  async signal(ep: AgentEndpoint, ref: string, signal: string): Promise<void> {
    await this.http.json(ep, {
      method: 'POST',
      path: `${p(ref)}/signal`,
      ...json({ signal }),
      timeoutMs: CALL_TIMEOUT_MS,
    });
  }

  async resize(ep: AgentEndpoint, ref: string, cols: number, rows: number): Promise<void> {
    await this.http.json(ep, {
      method: 'POST',
      path: `${p(ref)}/resize`,
      ...json({ cols, rows }),
      timeoutMs: CALL_TIMEOUT_MS,
    });
  }

  async remove(ep: AgentEndpoint, ref: string): Promise<void> {
    await this.http.json(ep, { method: 'DELETE', path: p(ref), timeoutMs: CALL_TIMEOUT_MS });
  }

  watch(
    ep: AgentEndpoint,
    o: { path?: string; recursive?: boolean; from?: string },
    signal?: AbortSignal,
  ): Promise<AsyncIterable<WatchEvent>> {
    const q = new URLSearchParams();
    if (o.path) q.set('path', o.path);
    if (o.recursive) q.set('recursive', '1');
    if (o.from) q.set('from', o.from);
    return this.http.lines(ep, { method: 'GET', path: `/watch?${q}`, signal }, LINE_MAX, isWatchEvent);
  }

  watches(ep: AgentEndpoint): Promise<WatchInfo[]> {
    return this.http.json(ep, { method: 'GET', path: '/watches', timeoutMs: CALL_TIMEOUT_MS });
  }

  async removeWatch(ep: AgentEndpoint, id: string): Promise<void> {
    await this.http.json(ep, {
      method: 'DELETE',
      path: `/watches/${encodeURIComponent(id)}`,
      timeoutMs: CALL_TIMEOUT_MS,
    });
  }
}

const STREAMS = new Set(['stdout', 'stderr', 'pty']);
const REASONS = new Set(['exit', 'signal', 'reboot', 'lost']);
const WATCH_TYPES = new Set(['create', 'write', 'remove', 'rename', 'chmod', 'overflow', 'watching']);
const offset = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** A line the daemon passes on is one of the three frames, with fields of the right kinds. */
export function isOutputFrame(v: unknown): v is OutputFrame {
  if (!v || typeof v !== 'object') return false;
  const f = v as Record<string, unknown>;
  if ('stream' in f)
    return (
      STREAMS.has(f.stream as string) &&
      offset(f.offset) &&
      typeof f.data === 'string' &&
      (f.encoding === undefined || f.encoding === 'base64')
    );
  if ('truncated' in f) {
    const t = f.truncated as Record<string, unknown> | null;
    return !!t && STREAMS.has(t.stream as string) && offset(t.before);
  }
  if ('start' in f) {
    const at = f.start as Record<string, unknown> | null;
    return !!at && typeof at === 'object' && Object.entries(at).every(([k, n]) => STREAMS.has(k) && offset(n));
  }
  return REASONS.has(f.reason as string) && typeof f.ended_at === 'string';
}

/** The frames of an answer in output pieces (output-pieces.ts), encoded here. */
async function* framesOfPieces(
  answer: { res: IncomingMessage; req: ClientRequest },
  ep: AgentEndpoint,
): AsyncIterable<OutputFrame> {
  let done = false;
  try {
    for await (const { head, bytes } of readPieces(answer.res, PIECE_HEAD_MAX, PIECE_MAX_BYTES)) {
      const h = head as { stream?: string; offset?: unknown };
      if (bytes && STREAMS.has(h.stream as string) && offset(h.offset))
        yield* encodeFrames(h.stream as ProcessStream, h.offset as number, bytes);
      else if (!bytes && isOutputFrame(head) && !('stream' in head)) yield head;
      else throw new AgentFailureError(`guest agent sent a bad piece: ${JSON.stringify(head).slice(0, 80)}`);
    }
    done = true;
  } catch (err) {
    if (err instanceof BadPieces) throw new AgentFailureError(`guest agent at ${where(ep)} sent ${err.message}`);
    throw err;
  } finally {
    if (!done) answer.req.destroy();
  }
}

/**
 * The frames of a `tail` read, which an agent that knows `tail` begins with a `start` frame. One
 * that does not (an image built before it) ignores the word and would send everything from 0:
 * that is refused, before anything is passed on.
 */
async function startedAtTail(
  frames: AsyncIterable<OutputFrame>,
  drop: () => void,
): Promise<AsyncIterable<OutputFrame>> {
  const it = frames[Symbol.asyncIterator]();
  const first = await it.next().catch((err: unknown) => {
    drop();
    throw err;
  });
  if (first.done || !('start' in first.value)) {
    drop();
    await it.return?.();
    throw new NotSupportedError(
      "this VM's agent does not read a process's output by lines (tail); read it with from, or use an image built since",
    );
  }
  return (async function* () {
    yield first.value;
    yield* { [Symbol.asyncIterator]: () => it };
  })();
}

export function isWatchEvent(v: unknown): v is WatchEvent {
  if (!v || typeof v !== 'object') return false;
  const e = v as Record<string, unknown>;
  return (
    typeof e.cursor === 'string' &&
    agentCursor(e.cursor) !== undefined &&
    WATCH_TYPES.has(e.type as string) &&
    (e.path === undefined || typeof e.path === 'string')
  );
}

const NO_KEEPER = 'this guest has no agent that keeps processes (the fake hypervisor without fake_agent)';

/** For guests whose agent is not an HTTP one (the fake's stand-ins): every call is NotSupported. */
export class NoGuestProcesses implements GuestProcesses {
  private no(): never {
    throw new NotSupportedError(NO_KEEPER);
  }
  start = async (): Promise<ProcessInfo> => this.no();
  list = async (): Promise<ProcessInfo[]> => this.no();
  get = async (): Promise<ProcessInfo> => this.no();
  output = async (): Promise<AsyncIterable<OutputFrame>> => this.no();
  stdin = async (): Promise<void> => this.no();
  signal = async (): Promise<void> => this.no();
  resize = async (): Promise<void> => this.no();
  remove = async (): Promise<void> => this.no();
  watch = async (): Promise<AsyncIterable<WatchEvent>> => this.no();
  watches = async (): Promise<WatchInfo[]> => this.no();
  removeWatch = async (): Promise<void> => this.no();
}

/** The processes port for a guest agent adapter: over its HTTP when it has one. */
export function guestProcessesOf(agent: object): GuestProcesses {
  const http = (agent as { http?: unknown }).http;
  return http instanceof AgentHttp ? new HttpGuestProcesses(http) : new NoGuestProcesses();
}
