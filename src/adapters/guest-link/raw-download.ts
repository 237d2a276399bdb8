import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { Readable } from 'node:stream';
import { AgentFailureError } from '../../domain/errors.js';
import { SEND_RAW, type AgentEndpoint, type RawSendable } from '../../ports/guest-agent.js';
import {
  canStopReads,
  readBuffered,
  socketFd,
  splice,
  SPLICE_MIN_BYTES,
  stopReads,
  type SpliceRun,
} from '../process-kit/splice.js';
import { fromStatus, REPLY_LIMITS, unavailable, where } from './agent-replies.js';

/** An answer's status line and headers must fit in this (a guest could send a head without end). */
export const HEAD_LIMIT = 16 * 1024;
const HEAD_TIMEOUT_MS = 120_000;
/**
 * A read smaller than this makes the body wait PACE_MS before it reads again. QEMU's user network
 * hands a guest's TCP stream to the host one segment (about 1460 bytes) at a time, and a reader
 * that wakes for each one (130,000 reads for 256 MiB) takes the CPU the guest's vCPU and QEMU's
 * network loop need: a relay that did so made copies out of a TCG guest 20% slower than direct.
 * Waiting a millisecond lets the kernel gather the segments (23 KiB a read instead of 2 KiB)
 * without slowing a fast source, whose reads are full (docs/benchmarks.md).
 */
export const PACE_BELOW = 32 * 1024;
export const PACE_MS = 1;

/** The Host a request to the agent names (its guard takes addresses only). */
export function agentHost(ep: AgentEndpoint): string {
  return ep.cid ? '127.0.0.1' : `${ep.host}:${ep.port}`;
}

export interface Head {
  status: number;
  headers: Map<string, string>;
  rest: Buffer;
}

/**
 * A download (GET /cp, a single file) over its own connection, read without Node's HTTP client:
 * the answer's head is parsed here, bounded and checked, and the body of a 200 is handed on as the
 * socket's own bytes, cut at its Content-Length. Parsing the body through the HTTP client costs the
 * daemon as much CPU as the copy itself; this is the hop's whole cost (docs/benchmarks.md).
 * Errors map like every other agent answer (a known caller-side code passes through, else 502).
 */
export async function rawDownload(
  socket: Duplex,
  ep: AgentEndpoint,
  path: string,
  helper: string | null,
): Promise<{ body: Readable; size: number }> {
  socket.write(`GET ${path} HTTP/1.1\r\nHost: ${agentHost(ep)}\r\nConnection: close\r\n\r\n`);
  const head = await readHead(socket, ep);
  if (head.status !== 200) throw fromStatus(head.status, await readError(socket, head));
  if (head.headers.has('transfer-encoding'))
    return fail(socket, `guest agent at ${where(ep)} answered a download without its length`);
  const len = head.headers.get('content-length');
  if (len === undefined || !/^\d{1,15}$/.test(len))
    return fail(socket, `guest agent at ${where(ep)} answered a download without a valid length`);
  return { body: new BoundedBody(socket, head.rest, Number(len), ep, helper), size: Number(len) };
}

function fail(socket: Duplex, message: string): never {
  socket.destroy();
  throw new AgentFailureError(message);
}

/** An answer's head, bounded and timed; the socket is left paused after it (`rest` holds what came with it). */
export function readHead(socket: Duplex, ep: AgentEndpoint): Promise<Head> {
  return new Promise((resolve, reject) => {
    let buf: Buffer = Buffer.alloc(0);
    const done = (err?: Error, head?: Head) => {
      clearTimeout(timer);
      socket.off('data', onData).off('error', onError).off('end', onEnd).off('close', onEnd);
      if (err) {
        socket.destroy();
        reject(err);
      } else resolve(head!);
    };
    const onData = (c: Buffer) => {
      buf = buf.length === 0 ? c : Buffer.concat([buf, c]);
      const end = buf.indexOf('\r\n\r\n');
      if ((end < 0 ? buf.length : end) > HEAD_LIMIT)
        return done(new AgentFailureError(`guest agent at ${where(ep)} sent an answer head over ${HEAD_LIMIT} bytes`));
      if (end < 0) return;
      socket.pause();
      try {
        done(undefined, { ...parseHead(buf.subarray(0, end).toString('latin1'), ep), rest: buf.subarray(end + 4) });
      } catch (err) {
        done(err as Error);
      }
    };
    const onError = (err: Error) => done(unavailable(ep, err));
    const onEnd = () =>
      done(new AgentFailureError(`guest agent at ${where(ep)} closed the connection before answering`));
    const timer = setTimeout(
      () => done(unavailable(ep, Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' }))),
      HEAD_TIMEOUT_MS,
    );
    // 'close' too: a socket destroyed on this side (the upload failed) ends neither way, and the
    // timer would hold the daemon's loop for its full length.
    socket.on('data', onData).on('error', onError).on('end', onEnd).on('close', onEnd);
  });
}

/** The status and headers (names lower-cased) of an HTTP/1.1 answer head; garbage is the agent's failure. */
export function parseHead(text: string, ep: AgentEndpoint): { status: number; headers: Map<string, string> } {
  const lines = text.split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})(?: .*)?$/.exec(lines[0]);
  if (!m)
    throw new AgentFailureError(
      `guest agent at ${where(ep)} answered garbage: ${JSON.stringify(lines[0].slice(0, 80))}`,
    );
  const headers = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon <= 0 || /^\s/.test(line))
      throw new AgentFailureError(
        `guest agent at ${where(ep)} sent a bad header line: ${JSON.stringify(line.slice(0, 80))}`,
      );
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    const seen = headers.get(name);
    if (seen !== undefined && name === 'content-length' && seen !== value) {
      throw new AgentFailureError(`guest agent at ${where(ep)} sent two different lengths`);
    }
    headers.set(name, seen !== undefined && name !== 'content-length' ? `${seen}, ${value}` : value);
  }
  return { status: Number(m[1]), headers };
}

/** The body of an error answer, up to the JSON limit (the connection closes after it). */
export async function readError(socket: Duplex, head: Head): Promise<string> {
  const parts: Buffer[] = [head.rest];
  let size = head.rest.length;
  socket.resume();
  try {
    for await (const c of socket) {
      size += (c as Buffer).length;
      if (size > REPLY_LIMITS.json) break;
      parts.push(c as Buffer);
    }
  } catch {
    // what arrived is the answer
  } finally {
    socket.destroy();
  }
  const raw = Buffer.concat(parts);
  return (/chunked/i.test(head.headers.get('transfer-encoding') ?? '') ? dechunk(raw) : raw).toString('utf8');
}

/** Chunked framing taken off a (small, complete or cut) error body. */
function dechunk(raw: Buffer): Buffer {
  const out: Buffer[] = [];
  let at = 0;
  for (;;) {
    const nl = raw.indexOf('\r\n', at);
    if (nl < 0) break;
    const size = parseInt(raw.subarray(at, nl).toString('latin1'), 16);
    if (!Number.isFinite(size) || size <= 0) break;
    out.push(raw.subarray(nl + 2, nl + 2 + size));
    at = nl + 2 + size + 2;
  }
  return Buffer.concat(out);
}

/**
 * The body of a 200: the bytes after the head, then the socket's, with backpressure, ending at
 * `length` (anything more the guest sends is dropped with the connection); a connection that ends
 * early fails the stream, so the client sees a cut copy, never a short one that looks whole.
 * A large body can instead be handed to the client's connection in the kernel ([SEND_RAW]).
 */
class BoundedBody extends Readable implements RawSendable {
  private left: number;
  private pacing?: NodeJS.Timeout;
  /** Set once the bytes left are the splice helper's: Node reads nothing more of the socket. */
  private handedOff = false;
  private run?: SpliceRun;
  private readonly onData = (c: Buffer) => this.accept(c);

  constructor(
    private readonly socket: Duplex,
    first: Buffer,
    length: number,
    private readonly ep: AgentEndpoint,
    private readonly helper: string | null,
  ) {
    super({ highWaterMark: 256 * 1024 });
    this.left = length;
    socket.on('data', this.onData);
    socket.on('end', () => this.cut());
    socket.on('close', () => this.cut());
    socket.on('error', (err) => this.destroy(unavailable(ep, err)));
    if (first.length > 0) this.accept(first);
    if (this.left === 0) this.finish();
  }

  private accept(c: Buffer): void {
    if (this.left <= 0 || this.destroyed) return;
    const part = c.length > this.left ? c.subarray(0, this.left) : c;
    this.left -= part.length;
    const more = this.push(part);
    if (this.left === 0) this.finish();
    else if (!more) this.socket.pause();
    else if (part.length < PACE_BELOW && !this.pacing) {
      // Nothing was pushed while paused, so the buffer still has room when the wait is over.
      this.socket.pause();
      this.pacing = setTimeout(() => {
        this.pacing = undefined;
        if (this.left > 0 && !this.destroyed) this.socket.resume();
      }, PACE_MS);
    }
  }

  private finish(): void {
    clearTimeout(this.pacing);
    this.push(null);
    this.socket.destroy();
  }

  private cut(): void {
    if (this.left > 0 && !this.destroyed && !this.handedOff)
      this.destroy(
        new AgentFailureError(`guest agent at ${where(this.ep)} broke off the download with ${this.left} bytes to go`),
      );
  }

  override _read(): void {
    if (this.left > 0 && !this.pacing && !this.handedOff) this.socket.resume();
  }

  /**
   * Moves what is left to `connection` with the splice helper when the body is large, the helper
   * is built and both ends are sockets with descriptors; false (nothing taken) otherwise. Node's
   * reads of the agent's socket are stopped first, and whatever Node already read (here or in the
   * socket) is written to `connection` before the helper starts, so the bytes stay in order. The
   * helper never reads past the declared length.
   */
  async [SEND_RAW](connection: Duplex): Promise<boolean> {
    const helper = this.helper;
    if (
      !helper ||
      this.left < SPLICE_MIN_BYTES ||
      this.destroyed ||
      this.handedOff ||
      !canStopReads(this.socket) ||
      socketFd(connection) === undefined
    )
      return false;
    this.handedOff = true;
    clearTimeout(this.pacing);
    this.pacing = undefined;
    this.socket.off('data', this.onData);
    stopReads(this.socket);
    const pending = readBuffered(this);
    let buffered = Buffer.concat(readBuffered(this.socket));
    if (buffered.length > this.left) buffered = buffered.subarray(0, this.left);
    pending.push(buffered);
    this.left -= buffered.length;
    try {
      await writeOut(connection, Buffer.concat(pending));
      if (this.left > 0) {
        this.run = splice(helper, this.socket as Socket, connection as Socket, this.left);
        await this.run.done;
        this.left = 0;
        // Handing a socket to a child stops Node's reads of it: the client's next request needs them.
        connection.resume();
      }
    } catch (err) {
      this.destroy();
      throw err;
    }
    this.push(null);
    this.socket.destroy();
    return true;
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.run?.kill();
    clearTimeout(this.pacing);
    this.socket.destroy();
    cb(err);
  }
}

/** Writes `data` and waits until it, and everything written before it, has left Node for the kernel. */
export function writeOut(connection: Duplex, data: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    if (connection.destroyed || !connection.writable) return reject(new Error('the client left'));
    connection.write(data, (err) => {
      if (err) return reject(err);
      if (connection.writableLength === 0) return resolve();
      // Something was written after us (should not happen: nobody else writes); wait for it too.
      connection.once('drain', () => resolve());
    });
  });
}
