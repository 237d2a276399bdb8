import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import type { ShellService } from '../../app/guest/shell-service.js';
import { toHttpError } from '../http/error-status.js';

/** Writes an HTTP error on a socket that asked for an upgrade, using the one error mapping. */
export function rejectUpgrade(socket: Duplex, err: unknown, extraHeaders = ''): void {
  const { status, body } = toHttpError(err);
  const text = JSON.stringify(body);
  socket.end(`HTTP/1.1 ${status} ${status === 401 ? 'Unauthorized' : 'Error'}\r\nContent-Type: application/json\r\n${extraHeaders}Content-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`);
}

/**
 * GET /shell: a WebSocket joined to a PTY. Binary frames are terminal bytes both ways; a text
 * frame `{type:"resize",cols,rows}` resizes; when the shell exits the agent sends
 * `{type:"exit",exit_code}` and closes with 1000. Closing the socket kills the PTY.
 */
export class ShellSocket {
  private readonly wss = new WebSocketServer({ noServer: true, perMessageDeflate: false });

  constructor(private readonly shells: ShellService) {}

  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const url = new URL(req.url ?? '/', 'http://agent');
    let session;
    try {
      session = this.shells.open(Object.fromEntries(url.searchParams));
    } catch (err) {
      return rejectUpgrade(socket, err);
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => this.join(ws, session));
  }

  private join(ws: WebSocket, pty: ReturnType<ShellService['open']>): void {
    pty.onData((d) => {
      if (ws.readyState === ws.OPEN) ws.send(d, { binary: true });
    });
    pty.onExit((code) => {
      if (ws.readyState === ws.OPEN) {
        ws.send(JSON.stringify({ type: 'exit', exit_code: code }));
        ws.close(1000, 'shell exited');
      }
    });
    ws.on('message', (data, isBinary) => {
      const buf = Buffer.isBuffer(data) ? data : Buffer.concat(data as Buffer[]);
      if (isBinary) return pty.write(buf);
      try {
        const msg = JSON.parse(buf.toString('utf8')) as { type?: string; cols?: number; rows?: number };
        if (msg.type === 'resize' && Number.isInteger(msg.cols) && Number.isInteger(msg.rows) && msg.cols! > 0 && msg.rows! > 0) {
          pty.resize(msg.cols!, msg.rows!);
        }
      } catch {
        // not JSON: treat as keystrokes, as a plain text client would mean them
        pty.write(buf);
      }
    });
    ws.on('close', () => pty.kill());
    ws.on('error', () => pty.kill());
  }
}
