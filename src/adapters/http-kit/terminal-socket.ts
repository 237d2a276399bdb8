import type { Duplex } from 'node:stream';
import type { IncomingMessage } from 'node:http';
import type { WebSocket, WebSocketServer } from 'ws';
import { answerOnSocket, toHttpError } from './error-status.js';
import type { Terminal } from '../../ports/terminal.js';
import { InvalidArgumentError } from '../../domain/errors.js';

/**
 * Joins a WebSocket to a terminal with the shell protocol: binary frames are terminal bytes both
 * ways; a text frame `{type:"resize",cols,rows}` resizes (other text is typed as keystrokes); when
 * the terminal exits, `{type:"exit",exit_code}` is sent and the socket closes with 1000. Closing
 * the socket closes the terminal.
 */
export function joinTerminal(ws: WebSocket, t: Terminal): void {
  t.onData((d) => {
    if (ws.readyState === ws.OPEN) ws.send(d, { binary: true });
  });
  t.onExit((code) => {
    if (ws.readyState === ws.OPEN) {
      if (code !== null) ws.send(JSON.stringify({ type: 'exit', exit_code: code }));
      ws.close(1000, 'shell exited');
    }
  });
  ws.on('message', (data, isBinary) => {
    const buf = Buffer.isBuffer(data) ? data : Buffer.concat(data as Buffer[]);
    if (isBinary) return t.write(buf);
    try {
      const msg = JSON.parse(buf.toString('utf8')) as { type?: string; cols?: number; rows?: number };
      if (
        msg.type === 'resize' &&
        Number.isInteger(msg.cols) &&
        Number.isInteger(msg.rows) &&
        msg.cols! > 0 &&
        msg.rows! > 0
      ) {
        t.resize(msg.cols!, msg.rows!);
      }
    } catch {
      t.write(buf);
    }
  });
  ws.on('close', () => t.close());
  ws.on('error', () => t.close());
}

/**
 * The request's target as a URL, or an InvalidArgumentError for one no URL parser takes (Node's
 * HTTP parser lets through absolute forms such as `http://[`): thrown in an upgrade handler, which
 * no framework catches, that error would stop the process.
 */
export function requestUrl(req: IncomingMessage): URL {
  try {
    return new URL(req.url ?? '/', 'http://svc');
  } catch {
    throw new InvalidArgumentError(`malformed request target ${JSON.stringify(String(req.url).slice(0, 200))}`);
  }
}

/** A path segment as it was before percent-encoding; an InvalidArgumentError (400) for a malformed one. */
export function decodedSegment(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    throw new InvalidArgumentError(`malformed percent-encoding in ${JSON.stringify(s.slice(0, 200))}`);
  }
}

/**
 * Runs an upgrade handler that may wait: whatever it throws or rejects with is answered on the
 * socket as an HTTP error, never left to stop the process.
 */
export function answeringUpgrade(
  handle: (req: IncomingMessage, socket: Duplex, head: Buffer) => Promise<void> | void,
): (req: IncomingMessage, socket: Duplex, head: Buffer) => void {
  return (req, socket, head) => {
    const failed = (err: unknown) => {
      socket.on('error', () => socket.destroy());
      if (!socket.destroyed) rejectUpgrade(socket, err);
    };
    try {
      void Promise.resolve(handle(req, socket, head)).catch(failed);
    } catch (err) {
      failed(err);
    }
  };
}

/** Writes an HTTP error on a socket that asked for an upgrade, using the one error mapping. */
export function rejectUpgrade(socket: Duplex, err: unknown, more: Record<string, string> = {}): void {
  const { status, body, headers } = toHttpError(err);
  answerOnSocket(socket, status, body, { ...headers, ...more });
}

/** The headers a WebSocket upgrade needs; checked before a terminal is opened for it. */
export function isWebSocketUpgrade(req: IncomingMessage): boolean {
  return (
    /^[A-Za-z0-9+/]{22}==$/.test(String(req.headers['sec-websocket-key'] ?? '')) &&
    req.headers['sec-websocket-version'] === '13'
  );
}

/**
 * Completes the upgrade and joins the socket to the terminal. A client that went away while the
 * terminal opened, or a handshake that fails, closes the terminal: it is never left behind.
 */
export function upgradeToTerminal(
  wss: WebSocketServer,
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  t: Terminal,
): void {
  let joined = false;
  socket.once('close', () => {
    if (!joined) t.close();
  });
  if (socket.destroyed) return t.close();
  wss.handleUpgrade(req, socket, head, (ws) => {
    joined = true;
    joinTerminal(ws, t);
  });
}
