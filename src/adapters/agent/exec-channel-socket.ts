import type { IncomingMessage } from 'node:http';
import { parse as parseQueryString } from 'node:querystring';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import type { ExecService } from '../../app/agent/exec-service.js';
import { EXEC_ANSWER_LIMIT, type ExecChannelAnswer } from '../../domain/agent.js';
import { InvalidArgumentError, PayloadTooLargeError } from '../../domain/errors.js';
import { parseExecQuery } from '../../domain/query.js';
import { toHttpError } from '../http-kit/error-status.js';
import { isWebSocketUpgrade, rejectUpgrade } from '../http-kit/terminal-socket.js';

/** A request message is a query string and an id; anything near this is not one. */
const REQUEST_LIMIT = 1 << 20;

/**
 * GET /exec/channel (EXEC_CHANNEL_PATH): buffered execs as numbered messages on one WebSocket
 * (the protocol is in domain/agent.ts). A request is parsed exactly as POST /exec parses its query;
 * many may run at once. A message that is not a request closes the socket (1008), and a closed
 * socket kills whatever it still runs, as a client leaving an HTTP exec does.
 */
export class ExecChannelSocket {
  private readonly wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: REQUEST_LIMIT });

  /**
   * `idleMs`: a channel with nothing running and no message for this long is closed. The daemon
   * closes its own after 10 s; this catches one it can no longer close, such as a connection a
   * guest saved in a snapshot still holds after the restore, when no host is at its other end.
   */
  constructor(
    private readonly exec: ExecService,
    private readonly idleMs = 65_000,
  ) {}

  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    if (!isWebSocketUpgrade(req))
      return rejectUpgrade(
        socket,
        new InvalidArgumentError('not a WebSocket upgrade: Sec-WebSocket-Key and Sec-WebSocket-Version 13 are needed'),
      );
    this.wss.handleUpgrade(req, socket, head, (ws) => this.serve(ws));
  }

  private serve(ws: WebSocket): void {
    const running = new Map<number, AbortController>();
    let idle: NodeJS.Timeout | undefined;
    const rest = () => {
      clearTimeout(idle);
      if (running.size === 0) idle = setTimeout(() => ws.terminate(), this.idleMs);
    };
    rest();
    ws.on('message', (data, isBinary) => {
      clearTimeout(idle);
      const msg = isBinary ? undefined : parseMessage(Buffer.isBuffer(data) ? data : Buffer.concat(data as Buffer[]));
      if (!msg) return ws.close(1008, 'not an exec channel request');
      if ('cancel' in msg) {
        running.get(msg.id)?.abort();
        return rest();
      }
      if (running.has(msg.id)) return ws.close(1008, `id ${msg.id} is already running`);
      const gone = new AbortController();
      running.set(msg.id, gone);
      void this.run(msg.id, msg.query, gone.signal).then((answer) => {
        running.delete(msg.id);
        if (ws.readyState === ws.OPEN) ws.send(answer);
        rest();
      });
    });
    ws.on('close', () => {
      clearTimeout(idle);
      for (const gone of running.values()) gone.abort();
      running.clear();
    });
    ws.on('error', () => ws.terminate());
  }

  /** The answer's text: a result, or the error the same request would get from POST /exec. */
  private async run(id: number, query: string, gone: AbortSignal): Promise<string> {
    try {
      const { buffered: _buffered, ...er } = parseExecQuery(parseQueryString(query));
      const text = JSON.stringify({
        id,
        result: await this.exec.buffered(er, undefined, gone),
      } satisfies ExecChannelAnswer);
      if (Buffer.byteLength(text) <= EXEC_ANSWER_LIMIT) return text;
      throw new PayloadTooLargeError(
        `the output does not fit one answer of ${EXEC_ANSWER_LIMIT} bytes; stream it (buffered=false)`,
      );
    } catch (err) {
      const { status, body } = toHttpError(err);
      return JSON.stringify({ id, status, error: body } satisfies ExecChannelAnswer);
    }
  }
}

function parseMessage(buf: Buffer): { id: number; query: string } | { id: number; cancel: true } | undefined {
  let m: unknown;
  try {
    m = JSON.parse(buf.toString('utf8'));
  } catch {
    return undefined;
  }
  if (typeof m !== 'object' || m === null) return undefined;
  const x = m as Record<string, unknown>;
  if (!Number.isSafeInteger(x.id)) return undefined;
  const id = x.id as number;
  if (x.cancel === true) return { id, cancel: true };
  return typeof x.query === 'string' ? { id, query: x.query } : undefined;
}
