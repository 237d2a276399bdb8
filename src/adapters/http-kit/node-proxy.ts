import {
  Agent,
  request,
  type ClientRequest,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type ServerResponse,
} from 'node:http';
import { connect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { spliceAnswer, spliceBody, type BodySplice } from './body-splice.js';
import { hasBody } from './route.js';
import { declaredLength, takeConnection } from './take-connection.js';
import { onceGone } from './streams.js';

export type { BodySplice };

/** Where a proxied call goes: another node's API (its advertised URL) or this daemon's own socket. */
export interface ProxyTarget {
  /** `http://host:port` */
  url?: string;
  socketPath?: string;
  /** A connection to the target the caller opened (a guest's port): used for one request. */
  stream?: Duplex;
  /** Headers put in place of the caller's (its credentials are not passed on). */
  headers: Record<string, string>;
  /**
   * The target is the caller's own app (a sandbox's port), not another node: the caller's headers
   * go on whole but for the hop-by-hop ones (its Host, cookies, Authorization, Origin).
   */
  endToEnd?: boolean;
  /** Large bodies of a declared length are moved socket to socket by this rather than through Node. */
  splice?: BodySplice;
}

/**
 * Hop-by-hop headers (RFC 9110 7.6.1), the caller's credentials, and what a browser says of where
 * a request comes from: not passed on. The node the caller reached checked those (its token, its
 * browser guard); the other node trusts the cluster's token instead.
 */
const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade'];
const DROP = new Set([
  ...HOP_BY_HOP,
  'origin',
  'referer',
  'sec-fetch-site',
  'sec-fetch-mode',
  'sec-fetch-dest',
  'sec-fetch-user',
  'host',
  'authorization',
  'cookie',
]);
const DROP_HOPS = new Set(HOP_BY_HOP);

const agent = new Agent({ keepAlive: true, maxSockets: 64, noDelay: true });

function headersFor(req: IncomingMessage, t: ProxyTarget, body?: Buffer): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  const drop = t.endToEnd ? DROP_HOPS : DROP;
  for (const [k, v] of Object.entries(req.headers)) if (!drop.has(k) && v !== undefined) out[k] = v;
  if (body) {
    out['content-length'] = String(body.length);
    out['content-type'] = 'application/json';
  } else if (req.headers['transfer-encoding']) out['transfer-encoding'] = 'chunked';
  return { ...out, ...t.headers };
}

function endpoint(t: ProxyTarget): { host?: string; port?: number; socketPath?: string } {
  if (t.socketPath) return { socketPath: t.socketPath };
  const u = new URL(t.url!);
  return { host: u.hostname.replace(/^\[|\]$/g, ''), port: Number(u.port || 80) };
}

/** The most bytes of an error answer `proxyRequest` reads to put it in its caller's words. */
const ERROR_ANSWER_MAX = 64 * 1024;

/**
 * Sends the request on to `t` (its body streamed, or `body` in its place) and streams the answer
 * back as it comes (NDJSON progress, followed output, downloads). Resolves with the answer's
 * status; rejects when `t` cannot be reached before anything was answered.
 *
 * A response whose head was sent already (lines of the caller's own came first) takes the
 * answer's body after them; an error answer is then put in its words by `errorLine` (its status
 * and text) and ends it.
 */
export function proxyRequest(
  req: IncomingMessage,
  res: ServerResponse,
  t: ProxyTarget,
  body?: Buffer,
  errorLine?: (status: number, text: string) => string,
): Promise<number> {
  const length = body ? undefined : declaredLength(req);
  if (t.splice && !t.stream && length !== undefined && length >= t.splice.minBytes)
    return proxySpliced(req, res, t, t.splice, length, errorLine);
  if (t.splice?.largeAnswers?.(req) && !t.stream && !body)
    return ownConnection(t).then((socket) => relay(req, res, t, { errorLine, socket }));
  return relay(req, res, t, { body, errorLine });
}

/** A connection of the call's own to `t` (closed after its answer), once connected. */
async function ownConnection(t: ProxyTarget): Promise<Socket> {
  const e = endpoint(t);
  const up = e.socketPath ? connect(e.socketPath) : connect(e.port!, e.host!);
  await new Promise<void>((resolve, reject) => {
    up.once('connect', resolve);
    up.once('error', reject);
  });
  return up;
}

/**
 * `proxyRequest` for a large body of a declared length: a connection of its own to the target
 * (closed after the answer), the head and what the server had read of the body written by Node,
 * the rest moved from the caller's connection to the target's by `sp`, the answer relayed as
 * usual. The caller's connection closes after the answer. Goes through Node as usual when the
 * connection cannot be taken.
 */
async function proxySpliced(
  req: IncomingMessage,
  res: ServerResponse,
  t: ProxyTarget,
  sp: BodySplice,
  length: number,
  errorLine?: (status: number, text: string) => string,
): Promise<number> {
  const up = await ownConnection(t);
  const taken = takeConnection(req, res);
  if (!taken) {
    up.destroy();
    return relay(req, res, t, { errorLine });
  }
  return relay(req, res, t, { errorLine, socket: up, feed: (out) => spliceBody(out, up, taken, length, sp, res) });
}

/** The call sent on and its answer streamed back; `socket`: a connection of the call's own, closed after. */
function relay(
  req: IncomingMessage,
  res: ServerResponse,
  t: ProxyTarget,
  o: {
    body?: Buffer;
    errorLine?: (status: number, text: string) => string;
    socket?: Socket;
    feed?: (out: ClientRequest) => void;
  },
): Promise<number> {
  const own = o.socket ?? t.stream;
  return new Promise((resolve, reject) => {
    const out = request(
      {
        ...(own ? { createConnection: () => own as Socket } : endpoint(t)),
        agent: t.socketPath || own ? undefined : agent,
        method: req.method,
        path: req.url,
        headers: { ...headersFor(req, t, o.body), ...(o.socket ? { connection: 'close' } : {}) },
      },
      (answer) => {
        const status = answer.statusCode ?? 502;
        if (res.headersSent && status >= 400) {
          let text = '';
          answer.setEncoding('utf8').on('data', (c: string) => (text = (text + c).slice(0, ERROR_ANSWER_MAX)));
          answer.on('error', () => res.destroy());
          answer.on('end', () => {
            res.end(o.errorLine ? o.errorLine(status, text) : '');
            resolve(status);
          });
          return;
        }
        const headers = { ...answer.headers };
        for (const k of ['connection', 'keep-alive', 'transfer-encoding']) delete headers[k];
        if (o.socket && t.splice && spliceAnswer(answer, res, o.socket, t.splice, headers, () => resolve(status)))
          return;
        if (!res.headersSent) {
          res.writeHead(status, headers);
          // A body of a declared length is on its way: its head goes out with its first bytes, in
          // one write. A stream (NDJSON progress, followed output) has its head sent at once.
          if (answer.headers['content-length'] === undefined) res.flushHeaders();
        }
        answer.pipe(res);
        answer.on('error', () => res.destroy());
        answer.on('end', () => resolve(answer.statusCode ?? 502));
        onceGone(res, () => {
          if (!answer.complete) {
            answer.destroy();
            resolve(answer.statusCode ?? 502);
          }
        });
      },
    );
    out.on('error', (err) => {
      if (res.headersSent) {
        res.destroy();
        resolve(502);
      } else reject(err);
    });
    // The caller going away ends the call on the other node too (an exec is cancelled there); one
    // gone while its connection was being made sends nothing.
    onceGone(res, () => out.destroy());
    if (o.feed) o.feed(out);
    else if (o.body) out.end(o.body);
    else if (!hasBody(req)) out.end();
    else {
      // headers now, not with the body's first bytes: an exec whose stdin is quiet starts at once
      out.flushHeaders();
      req.pipe(out);
    }
  });
}

/**
 * Sends an upgrade (a WebSocket) on to `t`: the request head is written again with `t`'s headers,
 * and from there the two sockets are spliced; the other node answers the handshake itself.
 */
export function proxyUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, t: ProxyTarget): void {
  // The caller left while the route was looked up: nothing is opened on the other side for it.
  if (socket.destroyed) return void t.stream?.destroy();
  const e = t.stream ? {} : endpoint(t);
  const up: Duplex = t.stream ?? (e.socketPath ? connect(e.socketPath) : connect(e.port!, e.host!));
  const drop = t.endToEnd ? DROP_HOPS : DROP;
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(req.headers))
    if (v !== undefined && (!drop.has(k) || k === 'connection' || k === 'upgrade')) headers[k] = v;
  Object.assign(headers, t.headers, t.endToEnd ? {} : { host: e.host ? `${e.host}:${e.port}` : 'svcd' });
  const lines = [`${req.method} ${req.url} HTTP/1.1`];
  for (const [k, v] of Object.entries(headers)) for (const one of [v].flat()) lines.push(`${k}: ${one}`);
  const splice = () => {
    up.write(lines.join('\r\n') + '\r\n\r\n');
    if (head.length) up.write(head);
    up.pipe(socket);
    socket.pipe(up);
  };
  if (t.stream) splice();
  else up.on('connect', splice);
  let answered = false;
  up.once('data', () => (answered = true));
  const end = () => {
    up.destroy();
    socket.destroy();
  };
  up.on('error', () => {
    if (!answered) socket.end('HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
    end();
  });
  up.on('close', end);
  socket.on('error', end);
  socket.on('close', end);
}
