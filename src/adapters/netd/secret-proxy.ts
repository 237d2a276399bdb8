import { readFileSync } from 'node:fs';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import http2, { type Http2ServerRequest, type Http2ServerResponse } from 'node:http2';
import { connect as netConnect, isIP, type AddressInfo, type Socket } from 'node:net';
import type { Duplex, Readable } from 'node:stream';
import { connect as tlsConnect, rootCertificates } from 'node:tls';
import { hostMatches, placeholdersOf, type EgressSecretBinding } from '../../domain/egress-secrets.js';
import { normalName } from '../../domain/egress.js';
import type { EgressCa } from './egress-ca.js';
import type { EgressEntry } from './egress-guard.js';
import { LeakScanner } from './leak-scan.js';
import { putSecrets, type Rewritten, type SecretValues, type SecretsAt } from './secret-headers.js';
import { headerObject, HOP, pairs, Upstream } from './secret-upstream.js';

export type { SecretValues } from './secret-headers.js';

export interface EgressSecretsOptions {
  vm: string;
  bindings: EgressSecretBinding[];
  ca: EgressCa;
  values: SecretValues;
  /** The certificates (PEM) an upstream's chain must lead to. */
  trust: string[];
  audit(e: EgressEntry): void;
}

/** A guest connection handed over for injection. */
export interface Intercepted {
  /** The guest's side: its bytes as it sent them (a TLS ClientHello first, or an HTTP request). */
  guest: Duplex;
  /** The host socket already connected to where the guest was going. */
  upstream: Socket;
  tls: boolean;
  /** The name the connection showed (SNI, or Host for plain HTTP): the host the secrets are put in for. */
  name: string;
  /** The protocols the guest's ClientHello offered. */
  alpn?: string[];
  /** Where it goes (for new connections and the log). */
  addr: string;
  to: { host: string; port: number };
  /** Opens another connection to `to` the way the first was (through the VM's SOCKS proxy); none: directly. */
  reopen?: () => Duplex;
}

const HEADER_MAX = 64 << 10;

/** The trust store of the host (Debian's bundle), or Node's own roots where there is none, plus `extra` (a PEM file). */
export function hostTrust(extra?: string): string[] {
  let system: string[];
  try {
    system = [readFileSync('/etc/ssl/certs/ca-certificates.crt', 'utf8')];
  } catch {
    system = [...rootCertificates];
  }
  return extra ? [...system, readFileSync(extra, 'utf8')] : system;
}

/**
 * One VM's egress secrets at work in svc-netd (docs/egress-secrets.md). A guest connection to a
 * host a secret is for is handed here: TLS is terminated with a certificate the VM's own CA signs
 * for that host (the guest trusts that CA, nothing else does), the upstream is reached with TLS
 * checked against the host's trust store, and every request's headers have the placeholders of
 * the secrets for that host replaced by their values, read from the secret store at that moment.
 * HTTP/1.1 (with WebSocket upgrades) and HTTP/2 pass as the upstream speaks them. A placeholder
 * headed anywhere else is refused: a request to a host it is not for is answered 403, and a
 * plain connection elsewhere that carries one is reset (LeakScanner); each is logged.
 */
export class EgressSecrets {
  private list: EgressSecretBinding[] = [];
  private byPlaceholder = new Map<string, string>();

  constructor(private readonly o: EgressSecretsOptions) {
    this.update(o.bindings);
  }

  get bindings(): EgressSecretBinding[] {
    return this.list;
  }

  /** New bindings (a PUT): the next request follows them. */
  update(bindings: EgressSecretBinding[]): void {
    this.list = bindings;
    this.byPlaceholder = new Map(bindings.flatMap((b) => placeholdersOf(b).map((p) => [p, b.secret] as const)));
  }

  /** Is some secret for `name`? Connections to it are intercepted. */
  isFor(name: string): boolean {
    return this.list.some((b) => b.hosts.some((h) => hostMatches(h, name)));
  }

  /** A scanner for a connection that is not intercepted: a placeholder in it ends it. */
  scanner(): LeakScanner {
    return new LeakScanner(() => this.byPlaceholder);
  }

  intercept(c: Intercepted): void {
    const fail = (rule: string, err: Error) => {
      this.o.audit({
        event: 'deny',
        proto: 'tcp',
        addr: c.addr,
        port: c.to.port,
        name: c.name,
        decision: 'deny',
        rule,
        error: err.message,
      });
      c.guest.destroy();
      c.upstream.destroy();
    };
    c.guest.on('error', () => c.upstream.destroy());
    if (!c.tls) {
      const route: Route = {
        c,
        upstream: new Upstream(c.upstream, () => c.reopen?.() ?? netConnect({ host: c.to.host, port: c.to.port })),
      };
      const server = http.createServer({ maxHeaderSize: HEADER_MAX, requestTimeout: 0, headersTimeout: 0 });
      server.on('request', (req: IncomingMessage, res: ServerResponse) => void this.forward(req, res, route));
      server.on(
        'upgrade',
        (req: IncomingMessage, sock: Duplex, head: Buffer) => void this.upgrade(req, sock, head, route),
      );
      server.on('clientError', (_err, sock: Duplex) => sock.destroy());
      c.guest.on('close', () => route.upstream.close());
      server.emit('connection', c.guest);
      return;
    }
    const name = normalName(c.name);
    const alpn = (c.alpn ?? []).filter((p) => p === 'h2' || p === 'http/1.1');
    const tlsTo = (given?: Duplex, protocols = alpn) => {
      const socket = given ?? c.reopen?.();
      const t = tlsConnect({
        socket,
        host: socket ? undefined : c.to.host,
        port: socket ? undefined : c.to.port,
        servername: isIP(name) ? undefined : name,
        ca: this.o.trust,
        ALPNProtocols: protocols.length ? protocols : undefined,
      }).setNoDelay(true);
      // The upstream's end is the connection's end. Over a stream of JavaScript's (a proxy's
      // connection) TLS would otherwise wait for its own close_notify to be taken by a peer that
      // has gone, and an HTTP agent would keep the dead connection as a free one.
      t.once('end', () => t.destroy());
      socket?.once('close', () => t.destroy());
      return t;
    };
    const up = tlsTo(c.upstream);
    up.once('error', (err) => fail('upstream-tls', err));
    up.once('secureConnect', () => {
      up.removeAllListeners('error');
      up.on('error', () => c.guest.destroy());
      const route: Route = { c, upstream: new Upstream(up, () => tlsTo(undefined, alpn.length ? ['http/1.1'] : [])) };
      this.terminator().then(
        (port) => {
          // The guest's TLS ends at a local server with native sockets (Node's HTTP/2 does not run
          // over a stream of JavaScript's), its certificate minted for the name the guest asked.
          const local = netConnect({ host: '127.0.0.1', port, noDelay: true });
          local.once('connect', () => {
            const key = local.localPort!;
            this.routes.set(key, route);
            local.once('close', () => this.routes.delete(key));
            c.guest.pipe(local).pipe(c.guest);
          });
          local.on('error', () => c.guest.destroy());
          c.guest.once('close', () => {
            local.destroy();
            route.upstream.close();
          });
        },
        (err: Error) => fail('egress-tls', err),
      );
    });
  }

  private readonly routes = new Map<number, Route>();
  private readonly accepted = new Set<Socket>();
  private terminating: Promise<number> | undefined;
  private terminatorServer: http2.Http2SecureServer | undefined;

  /** The local TLS server the intercepted connections end at (HTTP/2 and HTTP/1.1), made on first use. */
  private terminator(): Promise<number> {
    this.terminating ??= new Promise<number>((resolve, reject) => {
      const server = http2.createSecureServer({
        allowHTTP1: true,
        noDelay: true,
        maxSessionMemory: 64,
        SNICallback: (servername, cb) => {
          const name = normalName(servername);
          if (!this.isFor(name)) return cb(new Error(`no egress secret is for ${name}`));
          this.o.ca.contextFor(name).then(
            (ctx) => cb(null, ctx),
            (err: Error) => cb(err),
          );
        },
      });
      const routeOf = (sock: { remotePort?: number }) => this.routes.get(sock.remotePort ?? -1);
      server.on('request', (req: Http2ServerRequest | IncomingMessage, res: Http2ServerResponse | ServerResponse) => {
        const route = routeOf(req.socket);
        if (!route) return void req.socket.destroy();
        void this.forward(req, res, route);
      });
      server.on('upgrade', (req: IncomingMessage, sock: Socket, head: Buffer) => {
        const route = routeOf(sock);
        if (!route) return void sock.destroy();
        void this.upgrade(req, sock, head, route);
      });
      server.on('session', (s) => s.on('error', () => undefined));
      server.on('connection', (sock: Socket) => {
        this.accepted.add(sock);
        sock.once('close', () => this.accepted.delete(sock));
      });
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port));
      // It lives as long as its connections: it never keeps svc-netd (or a test) from exiting.
      server.unref();
      this.terminatorServer = server;
    });
    return this.terminating;
  }

  /** What a rewrite reads now. */
  private at(): SecretsAt {
    return { bindings: this.list, values: this.o.values, audit: (e: EgressEntry) => this.o.audit(e) };
  }

  /** Stops the local TLS server and ends what it carries (the VM's network is gone). */
  close(): void {
    this.terminatorServer?.close();
    for (const sock of this.accepted) sock.destroy();
    for (const r of this.routes.values()) r.upstream.close();
  }

  /** One request from the guest, its headers rewritten, sent on as the upstream speaks (HTTP/2 or HTTP/1.1). */
  private async forward(
    req: IncomingMessage | Http2ServerRequest,
    res: ServerResponse | Http2ServerResponse,
    route: Route,
  ): Promise<void> {
    const host = req.headers.host ?? (req.headers[':authority'] as string | undefined);
    const list = pairs(req.rawHeaders).filter(([k]) => !k.startsWith(':'));
    const r = await putSecrets(this.at(), route.c, list, req.url ?? '/', host);
    if (!r.ok) return refuse(res, r);
    const headers = headerObject(r.headers);
    const answer = (status: number, back: Record<string, string | string[]>, body: Readable) => {
      if (res.headersSent || res.destroyed) return;
      res.writeHead(status, back);
      body.pipe(res as NodeJS.WritableStream);
    };
    const failed = (err: Error) => {
      if (res.headersSent) return void res.destroy();
      res.writeHead(502, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: `svc egress: the upstream failed: ${err.message}` }));
    };
    const session = route.upstream.session();
    if (session) {
      const out: Record<string, string | string[]> = {
        ...headers,
        ':method': req.method ?? 'GET',
        ':path': req.url ?? '/',
        ':scheme': 'https',
        ':authority': host ?? route.c.name,
      };
      delete out.host;
      const up = session.request(out);
      up.on('response', (rh) => {
        const back: Record<string, string | string[]> = {};
        for (const [k, v] of Object.entries(rh))
          if (!k.startsWith(':') && !HOP.has(k) && v !== undefined) back[k] = v as string | string[];
        answer(Number(rh[':status'] ?? 502), back, up);
      });
      up.on('error', failed);
      req.pipe(up);
      return;
    }
    if (host !== undefined) headers.host = host;
    const up = http.request({
      agent: route.upstream.agent,
      method: req.method,
      path: req.url,
      headers,
      setHost: false,
    });
    up.on('response', (ur) => answer(ur.statusCode ?? 502, headerObject(pairs(ur.rawHeaders)), ur));
    up.on('error', failed);
    req.pipe(up);
  }

  /** An HTTP/1.1 upgrade (WebSocket): its head rewritten and sent on a connection of its own, then the two spliced. */
  private async upgrade(req: IncomingMessage, sock: Duplex, head: Buffer, route: Route): Promise<void> {
    const r = await putSecrets(this.at(), route.c, pairs(req.rawHeaders), req.url ?? '/', req.headers.host);
    if (!r.ok) {
      const body = JSON.stringify({ error: r.error });
      sock.end(
        `HTTP/1.1 ${r.status} Refused\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
      return;
    }
    const up = route.upstream.connection();
    const lines = [`${req.method} ${req.url} HTTP/1.1`, ...r.headers.map(([k, v]) => `${k}: ${v}`), '', ''];
    up.write(lines.join('\r\n'));
    if (head.length) up.write(head);
    sock.pipe(up).pipe(sock);
    up.on('error', () => sock.destroy());
    sock.on('error', () => up.destroy());
    up.on('close', () => sock.destroy());
    sock.on('close', () => up.destroy());
  }
}

interface Route {
  c: Intercepted;
  upstream: Upstream;
}

function refuse(res: ServerResponse | Http2ServerResponse, r: Extract<Rewritten, { ok: false }>): void {
  res.writeHead(r.status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: r.error }));
}
