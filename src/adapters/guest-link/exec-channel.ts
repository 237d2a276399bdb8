import WebSocket from 'ws';
import { EXEC_CHANNEL_PATH, type ExecChannelRequest, type ExecResult } from '../../domain/agent.js';
import { AgentFailureError, AgentUnavailableError } from '../../domain/errors.js';
import type { AgentEndpoint } from '../../ports/guest-agent.js';
import { fromStatus, REPLY_LIMITS, unavailable, where } from './agent-replies.js';
import { ReplyBudget } from './reply-budget.js';
import type { Connector } from './transport.js';

/** How long an agent that has no channel (an older agent) is asked over HTTP before the channel is tried again. */
const ABSENT_MS = 60_000;

export interface ChannelCall {
  /** The query string of POST /exec. */
  query: string;
  /** A deadline for the answer; none when the command has no timeout of its own. */
  timeoutMs?: number;
  /** The caller leaving: the command is cancelled in the guest. */
  signal?: AbortSignal;
}

/**
 * Buffered execs without stdin over one kept WebSocket per agent (the exec channel, protocol in
 * domain/agent.ts) instead of an HTTP request each: the guest reads one frame, not a request
 * through its router, which is most of an exec's cost in a TCG guest besides the fork
 * (docs/benchmarks.md). What comes back is checked like an HTTP answer: at most
 * REPLY_LIMITS.exec bytes, a known id, a well-formed result, errors mapped by their code. A
 * channel idle for `idleMs` is closed. `call` answers undefined when the agent has no channel.
 */
export class ExecChannels {
  private readonly channels = new Map<string, Promise<Channel | undefined>>();
  private readonly absentUntil = new Map<string, number>();

  constructor(
    private readonly connector: Connector,
    private readonly connectTimeoutMs: number,
    private readonly idleMs: number,
    private readonly budget: ReplyBudget = ReplyBudget.NONE,
  ) {}

  async call(ep: AgentEndpoint, c: ChannelCall): Promise<ExecResult | undefined> {
    const key = where(ep);
    // A channel may close (idle, or the agent went) while a call waits for it: then one fresh try.
    for (let tries = 0; ; tries++) {
      if ((this.absentUntil.get(key) ?? 0) > Date.now()) return undefined;
      const open = await this.channel(ep, key);
      if (!open) return undefined;
      if (!open.closed || tries > 0) return open.call(c);
    }
  }

  private channel(ep: AgentEndpoint, key: string): Promise<Channel | undefined> {
    let ch = this.channels.get(key);
    if (!ch) {
      ch = this.open(ep, key);
      this.channels.set(key, ch);
      // A failed or absent channel is forgotten at once, so the next call tries (or skips) afresh.
      const opened = ch;
      const forget = () => {
        if (this.channels.get(key) === opened) this.channels.delete(key);
      };
      void ch.then((got) => {
        if (!got) forget();
      }, forget);
    }
    return ch;
  }

  /** Closes every channel (daemon stop); their calls fail as the agent being unavailable. */
  close(): void {
    for (const ch of this.channels.values())
      void ch.then(
        (c) => c?.close(),
        () => undefined,
      );
    this.channels.clear();
  }

  private open(ep: AgentEndpoint, key: string): Promise<Channel | undefined> {
    const opened: Promise<Channel | undefined> = new Promise((resolve, reject) => {
      let channel: Channel | undefined;
      // The bytes of the answer being received, taken from the budget until the message is whole.
      let partial = 0;
      let dropped = false;
      const ws = new WebSocket(`ws://${ep.host}:${ep.port}${EXEC_CHANNEL_PATH}`, {
        perMessageDeflate: false,
        handshakeTimeout: this.connectTimeoutMs,
        maxPayload: REPLY_LIMITS.exec,
        createConnection: () => {
          const socket = this.connector(ep);
          // Before ws's own listener: a chunk is counted before the message it completes is handed out.
          socket.on('data', (c: Buffer) => {
            if (dropped) return;
            if (this.budget.take(c.length)) return void (partial += c.length);
            dropped = true;
            this.budget.give(partial);
            partial = 0;
            channel?.drop(this.budget.spent());
            ws.terminate();
          });
          socket.once('close', () => {
            this.budget.give(partial);
            partial = 0;
          });
          return socket as never;
        },
      });
      ws.on('message', () => {
        this.budget.give(partial);
        partial = 0;
      });
      ws.once('unexpected-response', (_req, res) => {
        res.resume();
        ws.terminate();
        // An agent from before the channel answers its upgrade 404, and one that answers anything
        // else but 101 gets no channel either: HTTP it is, for a while, where its answers are judged.
        this.absentUntil.set(key, Date.now() + ABSENT_MS);
        resolve(undefined);
      });
      ws.once('error', (err) => reject(unavailable(ep, err)));
      ws.once('open', () => {
        const ch = (channel = new Channel(ws, ep, this.idleMs));
        ch.onClose(() => {
          if (this.channels.get(key) === opened) this.channels.delete(key);
        });
        resolve(ch);
      });
    });
    return opened;
  }
}

interface Pending {
  resolve(r: ExecResult): void;
  reject(err: Error): void;
}

/** One open channel: numbered calls in flight, answers matched by id. */
class Channel {
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private idle: NodeJS.Timeout | undefined;
  private closeListeners: (() => void)[] = [];
  closed = false;

  constructor(
    private readonly ws: WebSocket,
    private readonly ep: AgentEndpoint,
    private readonly idleMs: number,
  ) {
    ws.on('message', (data, isBinary) =>
      this.answer(Buffer.isBuffer(data) ? data : Buffer.concat(data as Buffer[]), isBinary),
    );
    ws.on('error', (err) =>
      this.fail(
        (err as NodeJS.ErrnoException).code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH'
          ? new AgentFailureError(
              `guest agent at ${where(ep)} answered more than ${REPLY_LIMITS.exec} bytes; the answer was dropped`,
            )
          : unavailable(ep, err),
      ),
    );
    ws.on('close', () =>
      this.fail(unavailable(ep, Object.assign(new Error('the exec channel closed'), { code: 'ECONNRESET' }))),
    );
    this.armIdle();
  }

  onClose(l: () => void): void {
    this.closeListeners.push(l);
  }

  call(c: ChannelCall): Promise<ExecResult> {
    if (this.closed)
      return Promise.reject(
        unavailable(this.ep, Object.assign(new Error('the exec channel closed'), { code: 'ECONNRESET' })),
      );
    const id = this.nextId++;
    clearTimeout(this.idle);
    return new Promise<ExecResult>((resolve, reject) => {
      const settle = () => {
        clearTimeout(timer);
        c.signal?.removeEventListener('abort', leave);
        this.pending.delete(id);
        if (this.pending.size === 0) this.armIdle();
      };
      const cancel = (err: Error) => {
        settle();
        this.send({ id, cancel: true });
        reject(err);
      };
      const leave = () => cancel(new AgentUnavailableError('the caller went away'));
      const timer =
        c.timeoutMs === undefined
          ? undefined
          : setTimeout(
              () => cancel(unavailable(this.ep, Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' }))),
              c.timeoutMs,
            );
      this.pending.set(id, {
        resolve: (r) => {
          settle();
          resolve(r);
        },
        reject: (err) => {
          settle();
          reject(err);
        },
      });
      if (c.signal?.aborted) return leave();
      c.signal?.addEventListener('abort', leave, { once: true });
      this.send({ id, query: c.query });
    });
  }

  close(): void {
    this.ws.close(1000);
    this.fail(new AgentUnavailableError('the daemon closed the exec channel'));
  }

  private send(m: ExecChannelRequest): void {
    if (this.ws.readyState === this.ws.OPEN) this.ws.send(JSON.stringify(m));
  }

  private armIdle(): void {
    clearTimeout(this.idle);
    this.idle = setTimeout(() => this.close(), this.idleMs);
    this.idle.unref();
  }

  /** Checks one answer; an answer that is not one is the agent's failure and ends the channel. */
  private answer(buf: Buffer, isBinary: boolean): void {
    let m: Record<string, unknown> | undefined;
    try {
      const parsed: unknown = isBinary ? undefined : JSON.parse(buf.toString('utf8'));
      m = typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, unknown>) : undefined;
    } catch {
      m = undefined;
    }
    const p = typeof m?.id === 'number' ? this.pending.get(m.id) : undefined;
    if (!m || !Number.isSafeInteger(m.id)) return this.broken(buf);
    // An answer to a call that is over (cancelled, timed out) is dropped.
    if (!p) return;
    if (isResult(m.result)) return p.resolve(m.result);
    if (typeof m.status === 'number' && typeof m.error === 'object' && m.error !== null)
      return p.reject(fromStatus(m.status, JSON.stringify(m.error)));
    this.broken(buf);
  }

  /** Ends the channel and fails every call on it with `err` (the daemon's budget for answers is spent). */
  drop(err: Error): void {
    this.ws.terminate();
    this.fail(err);
  }

  private broken(buf: Buffer): void {
    this.ws.terminate();
    this.fail(
      new AgentFailureError(
        `guest agent at ${where(this.ep)} sent a bad exec channel answer: ${JSON.stringify(buf.subarray(0, 80).toString('utf8'))}`,
      ),
    );
  }

  private fail(err: Error): void {
    if (!this.closed) {
      this.closed = true;
      clearTimeout(this.idle);
      for (const l of this.closeListeners) l();
    }
    for (const p of [...this.pending.values()]) p.reject(err);
  }
}

function isResult(r: unknown): r is ExecResult {
  if (typeof r !== 'object' || r === null) return false;
  const x = r as Record<string, unknown>;
  return (
    typeof x.stdout === 'string' &&
    typeof x.stderr === 'string' &&
    typeof x.exit_code === 'number' &&
    (x.error === undefined || typeof x.error === 'string') &&
    (x.truncated === undefined || typeof x.truncated === 'boolean')
  );
}
