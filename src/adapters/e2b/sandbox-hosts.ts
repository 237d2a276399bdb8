import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { answerOnSocket, toHttpError } from '../http-kit/error-status.js';
import type { VirtualHosts } from '../http-kit/virtual-hosts.js';
import { proxyRequest, proxyUpgrade, type ProxyTarget } from '../http-kit/node-proxy.js';
import { InvalidArgumentError } from '../../domain/errors.js';
import { SvcError, type SvcClient } from '../client/svc-client.js';
import { ENVD_BASE } from './envd-common.js';
import { metaOf, type Sandboxes } from './sandboxes.js';

/** The domain the SDK is told when the config gives none: `localhost` and the daemon's port. */
export function defaultSandboxDomain(tcpPort: number | undefined): string {
  return tcpPort && tcpPort !== 80 ? `localhost:${tcpPort}` : 'localhost';
}

/** envd's port in a sandbox: the SDK's calls to it are svc's envd routes, not a sandbox's app. */
const ENVD_PORT = 49983;
const SANDBOX_ID = /^e2b-[0-9a-f]{12}$/;

class PortError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * E2B's sandbox URLs on the daemon's own listener (docs/e2b.md, "Sandbox URLs"). The SDK's
 * `getHost(port)` is `PORT-ID.DOMAIN`, DOMAIN being what the create answered (`e2b_domain`); a
 * request whose Host is one goes to that port on the sandbox's loopback through its agent (svc's
 * `GET /vms/{id}/ports/{port}`): HTTP requests one connection each, upgrades (WebSockets) spliced.
 * The request is the sandbox app's own, passed on whole (its Host, cookies, Authorization,
 * Origin): as E2B's public URLs, it needs neither the daemon's token nor its browser guard, and a
 * sandbox created with `network.allowPublicTraffic: false` takes only requests that carry its
 * traffic token (`e2b-traffic-access-token`, which is not passed on). A call under E2B_SANDBOX_URL
 * that names a sandbox's port other than envd's in its headers (what the SDK's code interpreter
 * sends) goes the same way. Any other request is the daemon's own API, with every check of it.
 */
export class SandboxHosts implements VirtualHosts {
  private readonly host: RegExp;

  constructor(
    private readonly client: SvcClient,
    private readonly boxes: Sandboxes,
    domain: string,
  ) {
    if (!/^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?(:\d{1,5})?$/i.test(domain))
      throw new InvalidArgumentError(
        `e2b_domain must be a host name, with a port or not; got ${JSON.stringify(domain)}`,
      );
    const name = domain.toLowerCase().replace(/:\d+$/, '');
    this.host = new RegExp(
      `^(\\d{1,5})-(${SANDBOX_ID.source.slice(1, -1)})\\.${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?::\\d{1,5})?$`,
    );
  }

  owns(req: IncomingMessage): boolean {
    return this.target(req) !== undefined;
  }

  /**
   * The sandbox and port a Host names, or a call under E2B_SANDBOX_URL (`/e2b/envd`) names in its
   * `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers when the port is not envd's own (the code
   * interpreter's 49999, say: E2B's proxy routes by those headers too); undefined for the rest.
   * `path` is the path the sandbox's app is asked for.
   */
  private target(req: IncomingMessage): { port: number; id: string; path?: string } | undefined {
    const m = this.host.exec(String(req.headers.host ?? '').toLowerCase());
    if (m) return { port: Number(m[1]), id: m[2] };
    const port = req.headers['e2b-sandbox-port'];
    if (typeof port !== 'string' || port === String(ENVD_PORT) || !req.url?.startsWith(`${ENVD_BASE}/`)) return;
    const id = String(req.headers['e2b-sandbox-id'] ?? '');
    if (!/^\d{1,5}$/.test(port) || !SANDBOX_ID.test(id)) return;
    return { port: Number(port), id, path: req.url.slice(ENVD_BASE.length) };
  }

  request(req: IncomingMessage, res: ServerResponse): void {
    void this.open(req).then(
      (t) =>
        proxyRequest(req, res, t).catch((err: Error) =>
          answer(res, new PortError(502, `sandbox port did not answer: ${err.message}`)),
        ),
      (err) => answer(res, err),
    );
  }

  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    void this.open(req).then(
      (t) => proxyUpgrade(req, socket, head, t),
      (err) => {
        const { status, json } = body(err);
        answerOnSocket(socket, status, json);
      },
    );
  }

  /** The sandbox's port as a proxy target: found, allowed, running, listening. */
  private async open(req: IncomingMessage): Promise<ProxyTarget> {
    const t = this.target(req);
    if (!t) throw new PortError(404, 'no sandbox port is named by this Host');
    const { port, id } = t;
    if (port < 1 || port > 65535) throw new PortError(400, `invalid port ${port}`);
    if (t.path !== undefined) req.url = t.path;
    const asked = await this.boxes.get(id);
    if (metaOf(asked).privateTraffic) await this.boxes.checkTraffic(req, id);
    delete req.headers['e2b-traffic-access-token'];
    // after the traffic token of a private one: traffic wakes a sandbox created with autoResume
    const vm = await this.boxes.forCall(asked);
    if (vm.status !== 'running')
      throw new PortError(
        409,
        `sandbox ${id} is ${vm.status === 'creating' ? 'starting' : 'paused'}: connect to it first`,
      );
    const stream = await this.client.openPort(id, port).catch((err: unknown) => {
      throw err instanceof SvcError && err.status === 404
        ? new PortError(502, `the sandbox ${id} is running but nothing listens on port ${port}`)
        : err;
    });
    return { stream, endToEnd: true, headers: { 'x-forwarded-proto': 'http' } };
  }
}

/** An error as E2B answers one: `{code, message}` with the status. */
function body(err: unknown): { status: number; json: { code: number; message: string } } {
  const status =
    err instanceof PortError ? err.status : err instanceof SvcError ? err.status || 503 : toHttpError(err).status;
  return { status, json: { code: status, message: (err as Error).message } };
}

function answer(res: ServerResponse, err: unknown): void {
  const { status, json } = body(err);
  const text = JSON.stringify(json);
  if (res.headersSent) return void res.destroy();
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
