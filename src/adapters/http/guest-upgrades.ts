import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer } from 'ws';
import type { GuestProxy } from '../../app/guest-proxy.js';
import { InvalidArgumentError, NotFoundError, UnauthenticatedError } from '../../domain/errors.js';
import { assertVmName } from '../../domain/names.js';
import { parseShellQuery, queryOf } from '../../domain/query.js';
import { parseGuestPort, PORT_UPGRADE } from '../../domain/agent.js';
import { AUTH_CHALLENGE, type BearerAuth } from '../http-kit/auth.js';
import { spliceUpgrade } from '../http-kit/streams.js';
import {
  answeringUpgrade,
  decodedSegment,
  isWebSocketUpgrade,
  rejectUpgrade,
  requestUrl,
  upgradeToTerminal,
} from '../http-kit/terminal-socket.js';
import { dashboardProtocol } from '../http-kit/sessions.js';
import type { Terminal } from '../../ports/terminal.js';

const SHELL_PATH = /^\/vms\/([^/]+)\/shell\/?$/;
const PORT_PATH = /^\/vms\/([^/]+)\/ports\/([^/]+)\/?$/;

/**
 * The daemon's upgrades, authenticated like every route. `GET /vms/{name}/shell`, a WebSocket,
 * is joined to the agent's /shell: bytes and resize frames pass through; when either side closes,
 * the other is closed too. `GET /vms/{name}/ports/{port}` with `Upgrade: tcp` becomes a byte
 * stream to that port on the guest's loopback (through the agent: no SSH, no forward). Errors
 * before the upgrade use the one HTTP error mapping.
 */
export class GuestUpgrades {
  private readonly wss = new WebSocketServer({
    noServer: true,
    perMessageDeflate: false,
    handleProtocols: dashboardProtocol,
  });

  constructor(
    private readonly guest: GuestProxy,
    private readonly auth: BearerAuth,
  ) {}

  handleUpgrade = answeringUpgrade((req, socket, head) => this.upgrade(req, socket, head));

  private async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    socket.on('error', () => socket.destroy());
    const url = requestUrl(req);
    const ok = await this.auth.verify(req).catch((err: unknown) => err as Error);
    if (ok instanceof Error) return rejectUpgrade(socket, ok);
    if (!ok) {
      return rejectUpgrade(socket, new UnauthenticatedError('missing or invalid bearer token'), {
        'WWW-Authenticate': AUTH_CHALLENGE,
      });
    }
    const p = PORT_PATH.exec(url.pathname);
    if (p) return this.port(req, socket, head, p);
    const m = SHELL_PATH.exec(url.pathname);
    if (!m) return rejectUpgrade(socket, new NotFoundError(`no websocket route ${url.pathname}`));
    if (!isWebSocketUpgrade(req)) {
      return rejectUpgrade(
        socket,
        new InvalidArgumentError('not a WebSocket upgrade: Sec-WebSocket-Key and Sec-WebSocket-Version 13 are needed'),
      );
    }
    let session: Terminal;
    try {
      const name = assertVmName(decodedSegment(m[1]));
      session = await this.guest.shell(name, parseShellQuery(queryOf(url.searchParams)));
    } catch (err) {
      return rejectUpgrade(socket, err);
    }
    upgradeToTerminal(this.wss, req, socket, head, session);
  }

  private async port(req: IncomingMessage, socket: Duplex, head: Buffer, m: RegExpExecArray): Promise<void> {
    if (String(req.headers.upgrade ?? '').toLowerCase() !== PORT_UPGRADE)
      return rejectUpgrade(socket, new InvalidArgumentError(`a guest port is opened with Upgrade: ${PORT_UPGRADE}`));
    let guest: Duplex;
    try {
      const name = assertVmName(decodedSegment(m[1]));
      guest = await this.guest.openPort(name, parseGuestPort(decodedSegment(m[2])));
    } catch (err) {
      return rejectUpgrade(socket, err);
    }
    spliceUpgrade(socket, head, guest, PORT_UPGRADE);
  }
}
