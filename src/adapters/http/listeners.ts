import { chmod, unlink } from 'node:fs/promises';
import { createServer, type IncomingMessage, type RequestListener, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { VirtualHosts } from '../http-kit/virtual-hosts.js';
import { answerClientError } from '../http-kit/error-status.js';
import type { AddressInfo } from 'node:net';
import { socketAnswers } from '../fs-kit/socket-file.js';
import { parseApiAddress } from '../../app/config.js';
import {
  browserGuard,
  guardRequests,
  guardUpgrades,
  type Refusal,
  type UpgradeHandler,
} from '../http-kit/browser-guard.js';

export class ListenError extends Error {}

/**
 * Serves one request listener on a Unix socket (0600) and, when `api` is set, on a TCP bind.
 * A stale socket file is replaced; a live one means another daemon, and start() refuses.
 */
export class HttpListeners {
  private readonly servers: Server[] = [];
  tcpPort: number | undefined;

  /**
   * `headerTimeoutMs`: a client must send its request headers within this (slowloris); bodies and
   * answers have no overall limit, so long exec streams, shells and big copies keep working.
   */
  /**
   * `hosts`: requests for other sites served on the same listeners (E2B's sandbox URLs), asked
   * first: what they own skips the browser guard and goes to them.
   */
  constructor(
    private readonly app: RequestListener,
    private readonly upgrade?: UpgradeHandler,
    private readonly headerTimeoutMs = 20_000,
    private readonly hosts?: VirtualHosts,
  ) {}

  /**
   * Refuses when another daemon serves the socket. Called before the daemon touches any state, so
   * a second daemon started by mistake changes nothing.
   */
  static async claim(socket: string): Promise<void> {
    if (await socketAnswers(socket)) throw new ListenError(`another svcd is already serving on ${socket}`);
  }

  /**
   * The TCP listener refuses foreign `Host`s and cross-origin changes (browser-guard.ts); the Unix
   * socket, which browsers cannot reach, serves any `Host`.
   */
  async start(opts: {
    socket: string;
    api: string;
    allowedHosts?: readonly string[];
    allowedOrigins?: readonly string[];
  }): Promise<void> {
    await HttpListeners.claim(opts.socket);
    // TCP first: whoever finds the socket answering (svc, a script, a test) finds the port too.
    if (opts.api) {
      const { host, port } = parseApiAddress(opts.api);
      const tcp = this.server(
        browserGuard({
          bindHost: host,
          allowedHosts: opts.allowedHosts ?? [],
          allowedOrigins: opts.allowedOrigins ?? [],
        }),
      );
      await listen(tcp, () => tcp.listen(port, host)).catch((err: Error) => {
        throw new ListenError(`cannot listen on ${opts.api}: ${err.message}`);
      });
      this.tcpPort = (tcp.address() as AddressInfo).port;
    }
    await unlink(opts.socket).catch(() => undefined);
    const unix = this.server();
    const old = process.umask(0o177);
    try {
      await listen(unix, () => unix.listen(opts.socket));
    } finally {
      process.umask(old);
    }
    await chmod(opts.socket, 0o600);
  }

  private server(refuse?: Refusal): Server {
    const s = createServer(
      {
        keepAliveTimeout: 65_000,
        headersTimeout: this.headerTimeoutMs,
        requestTimeout: 0,
        connectionsCheckingInterval: Math.min(30_000, Math.max(250, this.headerTimeoutMs / 4)),
      },
      this.hosted(refuse ? guardRequests(this.app, refuse) : this.app),
    );
    s.on('clientError', answerClientError);
    const upgrade = this.upgrade && (refuse ? guardUpgrades(this.upgrade, refuse) : this.upgrade);
    const hosts = this.hosts;
    if (hosts)
      s.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
        if (hosts.owns(req)) hosts.upgrade(req, socket, head);
        else if (upgrade) upgrade(req, socket, head);
        else socket.destroy();
      });
    else if (upgrade) s.on('upgrade', upgrade);
    this.servers.push(s);
    return s;
  }

  private hosted(own: RequestListener): RequestListener {
    const hosts = this.hosts;
    return hosts ? (req, res) => (hosts.owns(req) ? hosts.request(req, res) : own(req, res)) : own;
  }

  /** Stops accepting, lets in-flight requests finish for up to `graceMs`, then closes the rest. */
  async stop(graceMs = 5000): Promise<void> {
    await Promise.all(
      this.servers.map(
        (s) =>
          new Promise<void>((resolve) => {
            const timer = setTimeout(() => s.closeAllConnections(), graceMs);
            s.close(() => {
              clearTimeout(timer);
              resolve();
            });
            s.closeIdleConnections();
          }),
      ),
    );
  }
}

function listen(server: Server, start: () => void): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.once('listening', () => {
      server.off('error', reject);
      resolve();
    });
    start();
  });
}
