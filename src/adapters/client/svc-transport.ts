import { request as httpRequest, type ClientRequest, type IncomingMessage, type RequestOptions } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Duplex, Readable } from 'node:stream';
import { loadConfig } from '../config/yaml-config-file.js';
import type { TerminalRequest } from '../../domain/agent.js';
import { formatShellQuery } from '../../domain/query.js';

/** An error answer of the daemon (or a failure to reach it), with the HTTP status and `{error}` text. */
export class SvcError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code?: string,
  ) {
    super(message);
    this.name = 'SvcError';
  }
}

/** For `.catch`: a 404 answer (nothing there) as undefined; any other failure is thrown on. */
export function noneOn404(err: unknown): undefined {
  if (err instanceof SvcError && err.status === 404) return undefined;
  throw err;
}

/** The daemon is not there: the socket or port refused or does not exist. */
export class DaemonUnreachableError extends SvcError {
  constructor(where: string, cause: string) {
    super(
      0,
      `cannot reach svcd at ${where} (${cause}); start it with: npm start (or svcd --config FILE)`,
      'unreachable',
    );
    this.name = 'DaemonUnreachableError';
  }
}

export interface SvcClientOptions {
  /** Unix socket of the daemon (default: the config's socket, ~/.svc/svc.sock). */
  socket?: string;
  /** `http(s)://host:port` instead of the socket. */
  api?: string;
  /** Bearer token (default: SVC_TOKEN, else the config's api_token). */
  token?: string;
  /** The daemon's config file to read the socket and token from (default: SVC_CONFIG, else the usual places). */
  config?: string;
  env?: NodeJS.ProcessEnv;
}

/**
 * The daemon's URL from `--api`/`SVC_API`: `http://` when no scheme is given (`127.0.0.1:7474`, as
 * the daemon's own `api` key is written); anything else than http(s) is refused naming the flag.
 */
export function apiUrl(api: string): URL {
  const bad = () => new Error(`--api ${JSON.stringify(api)}: not the daemon's URL, such as http://127.0.0.1:7474`);
  let u: URL;
  try {
    u = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(api) ? api : `http://${api}`);
  } catch {
    throw bad();
  }
  if ((u.protocol !== 'http:' && u.protocol !== 'https:') || !u.hostname) throw bad();
  return u;
}

export const enc = encodeURIComponent;

/** A query string of `o`'s defined values (a list: the key repeated), `?` first; empty for none. */
export function qs(o: Record<string, string | number | boolean | string[] | undefined>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(o)) {
    if (v === undefined) continue;
    for (const x of Array.isArray(v) ? v : [v]) p.append(k, String(x));
  }
  const s = p.toString();
  return s ? `?${s}` : '';
}

/** A shell in a VM: terminal bytes both ways, resize, and the shell's exit code. */
export interface ShellConnection {
  write(data: Buffer | string): void;
  resize(cols: number, rows: number): void;
  onData(listener: (data: Buffer) => void): void;
  /** Resolves with the shell's exit code (null when the connection broke). */
  exited: Promise<number | null>;
  close(): void;
}

/**
 * How SvcClient reaches svcd: the Unix socket (default) or http(s), the bearer token, JSON calls,
 * NDJSON streams read line by line, streams read again when they break, upgrades (a port, the
 * shell's WebSocket); every error answer an SvcError.
 */
export class SvcTransport {
  readonly socket?: string;
  readonly api?: URL;
  protected readonly token?: string;

  constructor(o: SvcClientOptions = {}) {
    const env = o.env ?? process.env;
    let cfg: { socket: string; api_token: string } | undefined;
    try {
      cfg = loadConfig(o.config, env);
    } catch (err) {
      // A file asked for by name must be readable; the usual places are only a default.
      if (o.config) throw err;
      cfg = undefined;
    }
    const api = o.api ?? env.SVC_API;
    if (api) this.api = apiUrl(api);
    else this.socket = o.socket ?? env.SVC_SOCKET ?? cfg?.socket ?? join(homedir(), '.svc', 'svc.sock');
    this.token = o.token ?? env.SVC_TOKEN ?? (cfg?.api_token || undefined);
  }

  get where(): string {
    return this.api ? this.api.origin : this.socket!;
  }

  /** Sends a request; resolves with the response once headers arrive (any status). */
  raw(
    method: string,
    path: string,
    body?: Buffer | Readable,
    headers: Record<string, string> = {},
  ): Promise<IncomingMessage> {
    const h: Record<string, string> = { ...headers };
    if (Buffer.isBuffer(body)) h['content-length'] = String(body.length);
    const req = this.request(method, path, h);
    return new Promise((resolve, reject) => {
      req.on('response', resolve);
      req.on('error', (err) => reject(this.unreachable(err)));
      if (body === undefined) req.end();
      else if (Buffer.isBuffer(body)) req.end(body);
      else {
        // A body that fails (a file gone, an archive that is not one) fails the call with its own error.
        body.once('error', (err) => {
          reject(err);
          req.destroy();
        });
        // Headers go now, not with the body's first bytes: a command whose stdin is a pipe that
        // stays quiet (sleep 9 | svc x ..., a parent that never writes) starts at once, and a
        // daemon does not call the request's headers late (408).
        req.flushHeaders();
        body.pipe(req);
      }
    });
  }

  /**
   * A byte stream to TCP `port` on the VM's loopback, through its agent (GET /vms/{name}/ports/{port}
   * with `Upgrade: tcp`): speak the port's own protocol over it, destroy it to close.
   */
  openPort(name: string, port: number): Promise<Duplex> {
    const req = this.request('GET', `/vms/${enc(name)}/ports/${port}`, { connection: 'Upgrade', upgrade: 'tcp' });
    return new Promise((resolve, reject) => {
      req.on('upgrade', (_res, socket: Socket, head: Buffer) => {
        if (head.length) socket.unshift(head);
        resolve(socket);
      });
      req.on('response', (res) => void this.fail(res).catch(reject));
      req.on('error', (err) => reject(this.unreachable(err)));
      req.end();
    });
  }

  protected request(method: string, path: string, h: Record<string, string>): ClientRequest {
    if (this.token) h.authorization = `Bearer ${this.token}`;
    const opts: RequestOptions = this.api
      ? { protocol: this.api.protocol, host: this.api.hostname, port: this.api.port, method, path, headers: h }
      : { socketPath: this.socket, method, path, headers: h };
    return (this.api?.protocol === 'https:' ? httpsRequest : httpRequest)(opts);
  }

  protected unreachable(err: NodeJS.ErrnoException): Error {
    return ['ENOENT', 'ECONNREFUSED', 'EACCES'].includes(err.code ?? '')
      ? new DaemonUnreachableError(this.where, err.code!)
      : new SvcError(0, `request to svcd failed: ${err.message}`);
  }

  protected async text(res: IncomingMessage): Promise<string> {
    const parts: Buffer[] = [];
    for await (const c of res) parts.push(c as Buffer);
    return Buffer.concat(parts).toString('utf8');
  }

  protected async fail(res: IncomingMessage): Promise<never> {
    const t = await this.text(res);
    let msg = t || `HTTP ${res.statusCode}`;
    let code: string | undefined;
    try {
      const j = JSON.parse(t) as { error?: string; code?: string };
      if (j.error) msg = j.error;
      code = j.code;
    } catch {
      // not JSON
    }
    throw new SvcError(res.statusCode ?? 0, msg, code);
  }

  protected async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const res = await this.raw(method, path, payload, payload ? { 'content-type': 'application/json' } : {});
    if ((res.statusCode ?? 0) >= 300) return this.fail(res);
    const t = await this.text(res);
    if (!t) return undefined as T;
    try {
      return JSON.parse(t) as T;
    } catch {
      return t as T;
    }
  }

  protected async *lines<T>(res: IncomingMessage): AsyncIterable<T> {
    if ((res.statusCode ?? 0) >= 300) await this.fail(res);
    if (res.destroyed) return; // ended by an abort before it was read (its close has been)
    const rl = createInterface({ input: res, crlfDelay: Infinity });
    // A response destroyed without an error (an abort) ends no readline iteration by itself.
    const onClose = () => rl.close();
    res.once('close', onClose);
    try {
      for await (const line of rl) {
        if (line.trim()) yield JSON.parse(line) as T;
      }
    } finally {
      res.off('close', onClose);
      res.destroy();
    }
  }

  /**
   * Ends `res` when `signal` aborts, or at once when it has already: an abort that came while the
   * request was being made (a listener added after it would never be called, and the stream would
   * run on).
   */
  protected endOnAbort(res: IncomingMessage, signal?: AbortSignal): void {
    if (!signal) return;
    if (signal.aborted) return void res.destroy();
    const end = () => res.destroy();
    signal.addEventListener('abort', end, { once: true });
    res.once('close', () => signal.removeEventListener('abort', end));
  }

  /**
   * Runs `attempt` again when its connection breaks (unreachable daemon, 502/503/504, a cut
   * stream) until it returns true (done), `signal` aborts, or `retryMs` pass without a yield.
   * A 4xx ends it with its error.
   */
  protected async *resumable<T>(
    o: { signal?: AbortSignal; retryMs?: number },
    attempt: (this: this) => AsyncGenerator<T, boolean>,
  ): AsyncIterable<T> {
    let quietSince = Date.now();
    let wait = 100;
    let it: AsyncGenerator<T, boolean> | undefined;
    try {
      while (!o.signal?.aborted) {
        try {
          it = attempt.call(this);
          for (;;) {
            const n = await it.next();
            if (n.done) {
              if (n.value) return;
              break;
            }
            quietSince = Date.now();
            wait = 100;
            yield n.value;
          }
        } catch (err) {
          if (o.signal?.aborted) return;
          const retryable =
            err instanceof DaemonUnreachableError ||
            (err instanceof SvcError && (err.status === 0 || err.status >= 502)) ||
            isCut(err);
          if (!retryable || Date.now() - quietSince > (o.retryMs ?? 60_000)) throw err;
        }
        await new Promise((r) => setTimeout(r, wait));
        wait = Math.min(wait * 2, 2000);
      }
    } finally {
      // a caller that stops early (break) closes the connection the attempt holds
      await it?.return(true);
    }
  }

  /** A terminal in the VM: a login shell, or `cmd` with `args` run in it (`svc x -t`). */
  async shell(name: string, o: TerminalRequest = {}): Promise<ShellConnection> {
    // Loaded here: only terminals need it, and every other command starts 30 ms sooner without it.
    const { default: WebSocket } = await import('ws');
    const query = formatShellQuery(o).toString();
    const path = `/vms/${enc(name)}/shell${query ? `?${query}` : ''}`;
    const headers: Record<string, string> = this.token ? { authorization: `Bearer ${this.token}` } : {};
    const url = this.api
      ? `${this.api.protocol === 'https:' ? 'wss' : 'ws'}://${this.api.host}${path}`
      : `ws+unix://${this.socket}:${path}`;
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { headers, perMessageDeflate: false });
      const listeners: ((d: Buffer) => void)[] = [];
      const early: Buffer[] = []; // what comes before the first listener (a quick command's output)
      let code: number | null = null;
      const exited = new Promise<number | null>((r) => ws.on('close', () => r(code)));
      ws.on('unexpected-response', (_req, res) => void this.fail(res).catch(reject));
      ws.once('error', (err) => reject(new DaemonUnreachableError(this.where, err.message)));
      ws.on('message', (data, isBinary) => {
        const buf = Buffer.isBuffer(data) ? data : Buffer.concat(data as Buffer[]);
        if (isBinary) {
          if (!listeners.length) early.push(buf);
          for (const l of listeners) l(buf);
        } else {
          try {
            const m = JSON.parse(buf.toString()) as { type?: string; exit_code?: number };
            if (m.type === 'exit') code = m.exit_code ?? null;
          } catch {
            // ignore
          }
        }
      });
      ws.once('open', () =>
        resolve({
          write: (d) => ws.send(typeof d === 'string' ? Buffer.from(d) : d, { binary: true }),
          resize: (cols, rows) => ws.send(JSON.stringify({ type: 'resize', cols, rows })),
          onData: (l) => {
            listeners.push(l);
            for (const b of early.splice(0)) l(b);
          },
          exited,
          close: () => ws.close(),
        }),
      );
    });
  }
}

/** A stream that broke off mid-answer (the daemon or the VM went away): worth reading again. */
function isCut(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException)?.code;
  return (
    code === 'ECONNRESET' ||
    code === 'EPIPE' ||
    code === 'ERR_STREAM_PREMATURE_CLOSE' ||
    (err as Error)?.message === 'aborted'
  );
}
