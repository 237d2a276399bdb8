import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer } from 'ws';
import type { ShellService } from '../../app/agent/shell-service.js';
import { InvalidArgumentError } from '../../domain/errors.js';
import { queryOf } from '../../domain/query.js';
import {
  answeringUpgrade,
  isWebSocketUpgrade,
  rejectUpgrade,
  requestUrl,
  upgradeToTerminal,
} from '../http-kit/terminal-socket.js';

/**
 * GET /shell: a WebSocket joined to a PTY. Binary frames are terminal bytes both ways; a text
 * frame `{type:"resize",cols,rows}` resizes; when the shell exits the agent sends
 * `{type:"exit",exit_code}` and closes with 1000. Closing the socket kills the PTY.
 */
export class ShellSocket {
  private readonly wss = new WebSocketServer({ noServer: true, perMessageDeflate: false });

  constructor(private readonly shells: ShellService) {}

  readonly handleUpgrade = answeringUpgrade((req, socket, head) => this.upgrade(req, socket, head));

  private async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const url = requestUrl(req);
    if (!isWebSocketUpgrade(req))
      return rejectUpgrade(
        socket,
        new InvalidArgumentError('not a WebSocket upgrade: Sec-WebSocket-Key and Sec-WebSocket-Version 13 are needed'),
      );
    let session;
    try {
      session = await this.shells.open(queryOf(url.searchParams));
    } catch (err) {
      return rejectUpgrade(socket, err);
    }
    const pty = session;
    upgradeToTerminal(this.wss, req, socket, head, {
      write: (d) => pty.write(d),
      resize: (c, r) => pty.resize(c, r),
      onData: (l) => pty.onData(l),
      onExit: (l) => pty.onExit(l),
      close: () => pty.kill(),
    });
  }
}
