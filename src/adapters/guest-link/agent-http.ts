import { Agent, request, type ClientRequest, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { Readable } from 'node:stream';
import { AgentFailureError, AgentUnavailableError } from '../../domain/errors.js';
import type { AgentEndpoint } from '../../ports/guest-agent.js';
import { fromStatus, REPLY_LIMITS, unavailable, where } from './agent-replies.js';
import { ReplyBudget } from './reply-budget.js';
import type { Connector } from './transport.js';

export const CONNECT_TIMEOUT_MS = 2000;
export const IDLE_SOCKET_MS = 10_000;

export interface CallOptions {
  method: string;
  path: string;
  body?: Buffer | Readable;
  /** The length of a streamed body, when known: sent as Content-Length, so the bytes go on unframed. */
  bodyLength?: number;
  contentType?: string;
  /** A deadline for the whole call, answer included; without one only connecting is timed. */
  timeoutMs?: number;
  /** The most bytes of answer to read (REPLY_LIMITS.json unless given). */
  maxBytes?: number;
  /** Aborting drops the call (request and answer). */
  signal?: AbortSignal;
}

/**
 * HTTP to guest agents, shared by the daemon's adapters that speak to them (HttpGuestAgent,
 * HttpGuestProcesses): connections kept alive per endpoint over a Connector (TCP, vsock, hybrid
 * vsock), a short connect timeout, answers read up to a bound (each, and all together through
 * `budget`), errors mapped to the domain's.
 */
export class AgentHttp {
  private readonly agents = new Map<string, Agent>();

  constructor(
    readonly connector: Connector,
    readonly budget: ReplyBudget = ReplyBudget.NONE,
  ) {}

  private agentFor(ep: AgentEndpoint): Agent {
    const key = where(ep);
    let a = this.agents.get(key);
    if (!a) {
      // Idle kept-alive sockets close after 10 s (before the agent's 65 s), so a burst leaves no files open.
      a = new Agent({ keepAlive: true, maxSockets: 64, keepAliveMsecs: 10_000, timeout: IDLE_SOCKET_MS });
      const connector = this.connector;
      (a as unknown as { createConnection: (opts: unknown, cb: unknown) => unknown }).createConnection = () =>
        connector(ep);
      this.agents.set(key, a);
    }
    return a;
  }

  /** Sends a request and resolves with the response once headers arrive. Maps transport errors. */
  send(ep: AgentEndpoint, o: CallOptions): Promise<{ res: IncomingMessage; req: ClientRequest }> {
    return new Promise((resolve, reject) => {
      const headers: Record<string, string> = {};
      if (o.contentType) headers['content-type'] = o.contentType;
      if (Buffer.isBuffer(o.body)) headers['content-length'] = String(o.body.length);
      else if (o.bodyLength !== undefined) headers['content-length'] = String(o.bodyLength);
      const req = request({
        agent: this.agentFor(ep),
        host: ep.host,
        port: ep.port,
        method: o.method,
        path: o.path,
        headers,
      });
      let settled = false;
      const started = Date.now();
      const fail = (err: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        unhook();
        req.destroy();
        reject(err);
      };
      const timer = setTimeout(
        () => fail(unavailable(ep, Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' }))),
        o.timeoutMs ?? CONNECT_TIMEOUT_MS,
      );
      req.on('socket', (s) => {
        // Once connected, only an explicit overall timeout still applies.
        const connected = () => {
          if (!o.timeoutMs) clearTimeout(timer);
        };
        if ((s as { connecting?: boolean }).connecting) s.once('connect', connected);
        else connected();
      });
      req.on('error', (err) => fail(unavailable(ep, err)));
      const abort = () => {
        fail(new AgentUnavailableError('the caller went away'));
        req.destroy();
      };
      const unhook = () => o.signal?.removeEventListener('abort', abort);
      if (o.signal?.aborted) return abort();
      o.signal?.addEventListener('abort', abort, { once: true });
      req.on('response', (res) => {
        if (settled) return void res.resume();
        settled = true;
        clearTimeout(timer);
        res.once('close', unhook);
        if (o.timeoutMs) {
          // The deadline covers the answer too: a guest that stalls mid-body is cut off.
          const left = Math.max(1, o.timeoutMs - (Date.now() - started));
          const late = setTimeout(
            () =>
              res.destroy(
                new AgentFailureError(`guest agent at ${where(ep)} did not finish its answer within ${o.timeoutMs} ms`),
              ),
            left,
          );
          res.once('close', () => clearTimeout(late));
        }
        resolve({ res, req });
      });
      if (o.body === undefined) req.end();
      else if (Buffer.isBuffer(o.body)) req.end(o.body);
      else {
        const body = o.body;
        body.on('error', (err) => fail(unavailable(ep, err)));
        // A client that goes away mid-upload must not leave a half request open to the agent.
        body.on('close', () => {
          if (!body.readableEnded) fail(new AgentFailureError('the upload was cut off by the client'));
        });
        // headers now, not with the body's first bytes: an exec whose stdin is quiet starts at once
        req.flushHeaders();
        body.pipe(req);
      }
    });
  }

  /**
   * Reads an answer up to `max` bytes; past it the connection is dropped and the call fails. Its
   * bytes are taken from the daemon's budget as they arrive and given back at the end; when the
   * budget is spent the answer is dropped too (503, Retry-After).
   */
  async readAll(res: IncomingMessage, ep: AgentEndpoint, max: number = REPLY_LIMITS.json): Promise<string> {
    const declared = Number(res.headers['content-length'] ?? 0);
    const tooBig = () => {
      res.destroy();
      return new AgentFailureError(
        `guest agent at ${where(ep)} answered more than ${max} bytes; the answer was dropped`,
      );
    };
    if (declared > max) throw tooBig();
    const parts: Buffer[] = [];
    let size = 0;
    try {
      for await (const c of res) {
        const n = (c as Buffer).length;
        if (size + n > max) throw tooBig();
        if (!this.budget.take(n)) {
          res.destroy();
          throw this.budget.spent();
        }
        size += n;
        parts.push(c as Buffer);
      }
      return Buffer.concat(parts).toString('utf8');
    } catch (err) {
      if (err instanceof AgentFailureError || err instanceof AgentUnavailableError) throw err;
      throw new AgentFailureError(`guest agent at ${where(ep)} broke off its answer: ${(err as Error).message}`);
    } finally {
      this.budget.give(size);
    }
  }

  async json<T>(ep: AgentEndpoint, o: CallOptions): Promise<T> {
    const { res } = await this.send(ep, o);
    // Taken now: once the answer is read, the socket goes back to the pool and `res` lets go of it.
    const socket = res.socket;
    const text = await this.readAll(res, ep, o.maxBytes);
    const status = res.statusCode ?? 0;
    if (status >= 300) throw notKept(socket, fromStatus(status, text));
    if (status === 204) return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch {
      throw notKept(
        socket,
        new AgentFailureError(`guest agent at ${where(ep)} answered garbage: ${JSON.stringify(text.slice(0, 80))}`),
      );
    }
  }

  /**
   * An NDJSON answer, line by line: each line at most `maxLine` bytes, parsed, and checked by
   * `valid` (a guest's garbage is an AgentFailureError, never passed on). Leaving early closes the
   * connection.
   */
  async lines<T>(
    ep: AgentEndpoint,
    o: CallOptions,
    maxLine: number,
    valid: (v: unknown) => v is T,
  ): Promise<AsyncIterable<T>> {
    return linesOf(await this.open(ep, o), maxLine, valid);
  }

  /** A call whose answer the caller reads as it streams: a status of 300 or more is the agent's error, thrown. */
  async open(ep: AgentEndpoint, o: CallOptions): Promise<{ res: IncomingMessage; req: ClientRequest }> {
    const { res, req } = await this.send(ep, o);
    if ((res.statusCode ?? 0) >= 300) {
      const socket = res.socket;
      throw notKept(socket, fromStatus(res.statusCode ?? 0, await this.readAll(res, ep)));
    }
    return { res, req };
  }

  /** Closes kept-alive connections (daemon stop). */
  close(): void {
    for (const a of this.agents.values()) a.destroy();
    this.agents.clear();
  }
}

/**
 * `err`, once the connection that carried it is closed when it is the agent's failure: such a
 * connection is not kept for the next call, since an agent that lies may also hold it without
 * serving what comes next (found by the reply fuzz target).
 */
function notKept(socket: Socket | null, err: Error): Error {
  if (err instanceof AgentFailureError) socket?.destroy();
  return err;
}

/** An NDJSON answer's lines, as `AgentHttp.lines` reads them, from an answer already open. */
export function linesOf<T>(
  { res, req }: { res: IncomingMessage; req: ClientRequest },
  maxLine: number,
  valid: (v: unknown) => v is T,
): AsyncIterable<T> {
  return (async function* () {
    let done = false;
    try {
      for await (const line of boundedLines(res, maxLine)) {
        if (!line.trim()) continue;
        let v: unknown;
        try {
          v = JSON.parse(line);
        } catch {
          v = undefined;
        }
        if (!valid(v)) throw new AgentFailureError(`guest agent sent a bad line: ${JSON.stringify(line.slice(0, 80))}`);
        yield v;
      }
      done = true;
    } finally {
      if (!done) req.destroy();
    }
  })();
}

/** Lines of a stream, each at most `max` bytes: a guest cannot make the daemon buffer an endless line. */
export async function* boundedLines(
  input: AsyncIterable<unknown>,
  max: number,
  tooLong: (max: number) => Error = (m) =>
    new AgentFailureError(`guest agent sent an exec frame longer than ${m} bytes`),
): AsyncIterable<string> {
  let pending: Buffer[] = [];
  let size = 0;
  for await (const c of input) {
    let chunk = c as Buffer;
    for (let nl = chunk.indexOf(10); nl !== -1; nl = chunk.indexOf(10)) {
      if (size + nl > max) break;
      pending.push(chunk.subarray(0, nl));
      yield Buffer.concat(pending).toString('utf8');
      pending = [];
      size = 0;
      chunk = chunk.subarray(nl + 1);
    }
    size += chunk.length;
    if (size > max) throw tooLong(max);
    pending.push(chunk);
  }
  if (size > 0) yield Buffer.concat(pending).toString('utf8');
}
