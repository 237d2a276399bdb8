import type { Duplex, Readable } from 'node:stream';
import WebSocket from 'ws';
import type {
  AgentHealth,
  CopyMode,
  ExecFrame,
  GuestEgress,
  GuestIdentity,
  ExecRequest,
  ExecResult,
  FsInfo,
  GuestStats,
  MaterializeRequest,
  Readiness,
} from '../../domain/agent.js';
import { PORT_PATH, PORT_UPGRADE, type AgentFeature } from '../../domain/agent.js';
import { formatExecQuery, formatShellQuery } from '../../domain/query.js';
import { AgentFailureError, AgentUnavailableError, isDomainError, NotSupportedError } from '../../domain/errors.js';
import type { AgentEndpoint, FsOp, GuestAgent, ShellOptions, UploadOptions } from '../../ports/guest-agent.js';
import { fromStatus, REPLY_LIMITS, unavailable } from './agent-replies.js';
import { AgentHttp, boundedLines, CONNECT_TIMEOUT_MS, IDLE_SOCKET_MS } from './agent-http.js';
import { ExecChannels } from './exec-channel.js';
import { agentHost, rawDownload, readError, readHead } from './raw-download.js';
import { rawUpload } from './raw-upload.js';
import { spliceHelper } from '../process-kit/splice.js';
import { tcpConnector, type Connector } from './transport.js';
import type { Terminal } from '../../ports/terminal.js';

export { REPLY_LIMITS } from './agent-replies.js';
import { ReplyBudget } from './reply-budget.js';

/** How long past its own timeout an exec may take to answer (the agent kills, then reports). */
const EXEC_GRACE_MS = 30_000;
/** fs operations and secret writes answer in well under this, or the guest is not answering. */
const FS_TIMEOUT_MS = 120_000;

const execQuery = (req: ExecRequest, buffered: boolean) => formatExecQuery(req, buffered).toString();

/** What the daemon's config says about talking to agents. */
export interface AgentOptions {
  splice?: string;
  replyBudgetMb?: number;
}

/** The agent options of a config (every driver builds its HttpGuestAgent with them). */
export function agentOptions(config: { splice: string; guest_reply_budget_mb: number }): AgentOptions {
  return { splice: config.splice, replyBudgetMb: config.guest_reply_budget_mb };
}

/**
 * The GuestAgent port over HTTP, on TCP (the agent port's host forward) or vsock (through a
 * Connector). Keeps connections alive per endpoint; connects with a short timeout; streams bodies
 * both ways with backpressure and tears a stream down when either side goes away.
 */
export class HttpGuestAgent implements GuestAgent {
  /** The HTTP it speaks, shared with the adapters for other agent routes (HttpGuestProcesses). */
  readonly http: AgentHttp;
  private readonly channels: ExecChannels;

  private readonly helper: string | null;

  /**
   * `splice`: the config's `splice` (large copies moved socket to socket by the svc-splice helper);
   * `replyBudgetMb`: the config's `guest_reply_budget_mb` (0 or unset: no budget).
   */
  constructor(
    private readonly connector: Connector = tcpConnector,
    o: AgentOptions = {},
  ) {
    const budget = new ReplyBudget((o.replyBudgetMb ?? 0) * 2 ** 20);
    this.http = new AgentHttp(connector, budget);
    this.channels = new ExecChannels(connector, CONNECT_TIMEOUT_MS, IDLE_SOCKET_MS, budget);
    this.helper = spliceHelper(o.splice);
  }

  health(ep: AgentEndpoint, timeoutMs?: number): Promise<AgentHealth> {
    return this.http.json(ep, { method: 'GET', path: '/health', timeoutMs });
  }

  readiness(ep: AgentEndpoint): Promise<Readiness> {
    return this.http.json(ep, { method: 'GET', path: '/readiness', timeoutMs: 2000 });
  }

  stats(ep: AgentEndpoint): Promise<GuestStats> {
    return this.http.json(ep, { method: 'GET', path: '/stats', timeoutMs: 5000 });
  }

  /**
   * An exec as a named user or with env, or a terminal running a command, goes only to an agent
   * that says it knows them: one before would ignore the key and run the command as root, without
   * the variables, or open a login shell instead.
   */
  private async checkFeatures(ep: AgentEndpoint, needs: [AgentFeature, string][]): Promise<void> {
    if (!needs.length) return;
    const h = await this.health(ep, 5000);
    for (const [feature, what] of needs)
      if (!h.features?.includes(feature))
        throw new NotSupportedError(`this VM's agent ${what}, or deploy this svc's agent (svc agent deploy NAME)`);
  }

  private execNeeds(req: ExecRequest): [AgentFeature, string][] {
    const needs: [AgentFeature, string][] = [];
    if (req.user !== undefined)
      needs.push(['exec_user', 'runs commands as a user only by uid (an older agent): use uid']);
    if (req.env && Object.keys(req.env).length)
      needs.push(['exec_env', 'sets no env for an exec (an older agent): use env in the command (env NAME=VALUE CMD)']);
    return needs;
  }

  /** Without stdin over the agent's exec channel (exec-channel.ts); with stdin, or an agent without one, over HTTP. */
  async exec(ep: AgentEndpoint, req: ExecRequest, stdin?: Readable, signal?: AbortSignal): Promise<ExecResult> {
    await this.checkFeatures(ep, this.execNeeds(req));
    const timeoutMs = req.timeoutMs ? req.timeoutMs + EXEC_GRACE_MS : undefined;
    if (!stdin) {
      const r = await this.channels.call(ep, { query: execQuery(req, true), timeoutMs, signal });
      if (r) return r;
    }
    return this.http.json(ep, {
      method: 'POST',
      path: `/exec?${execQuery(req, true)}`,
      body: stdin,
      contentType: stdin ? 'application/octet-stream' : undefined,
      maxBytes: REPLY_LIMITS.exec,
      timeoutMs,
      signal,
    });
  }

  async *execStream(
    ep: AgentEndpoint,
    req: ExecRequest,
    stdin?: Readable,
    signal?: AbortSignal,
  ): AsyncIterable<ExecFrame> {
    await this.checkFeatures(ep, this.execNeeds(req));
    const { res, req: creq } = await this.http.open(ep, {
      method: 'POST',
      path: `/exec?${execQuery(req, false)}`,
      body: stdin,
      contentType: stdin ? 'application/octet-stream' : undefined,
      signal,
    });
    let sawExit = false;
    try {
      for await (const line of boundedLines(res, REPLY_LIMITS.frame)) {
        if (!line.trim()) continue;
        let frame: ExecFrame;
        try {
          frame = JSON.parse(line) as ExecFrame;
        } catch {
          throw new AgentFailureError(`guest agent sent a bad exec frame: ${JSON.stringify(line.slice(0, 80))}`);
        }
        if (!isFrame(frame))
          throw new AgentFailureError(`guest agent sent a bad exec frame: ${JSON.stringify(line.slice(0, 80))}`);
        if (frame.type === 'exit') sawExit = true;
        yield frame;
      }
      if (!sawExit) throw new AgentFailureError('guest agent ended the exec stream without an exit frame');
    } catch (err) {
      if (isDomainError(err)) throw err;
      throw new AgentUnavailableError(`guest agent broke off the exec stream: ${(err as Error).message}`);
    } finally {
      // Leaving early (client gone) closes the agent connection, which kills the command there.
      if (!sawExit) creq.destroy();
    }
  }

  async upload(ep: AgentEndpoint, o: UploadOptions, body: Readable): Promise<void> {
    const p = new URLSearchParams({ path: o.path, mode: o.mode });
    if (o.permissions) p.set('permissions', o.permissions);
    if (o.uid !== undefined) p.set('uid', String(o.uid));
    if (o.gid !== undefined) p.set('gid', String(o.gid));
    const contentType = o.mode === 'tar' ? 'application/x-tar' : 'application/octet-stream';
    // A large body of known length goes from the client's socket to the agent's in the kernel (raw-upload.ts).
    if (
      o.size !== undefined &&
      (await rawUpload(
        this.connector,
        ep,
        { path: `/cp?${p}`, contentType, size: o.size, connectTimeoutMs: CONNECT_TIMEOUT_MS, helper: this.helper },
        body,
      ))
    )
      return;
    await this.http.json(ep, { method: 'PUT', path: `/cp?${p}`, body, bodyLength: o.size, contentType });
  }

  async download(
    ep: AgentEndpoint,
    path: string,
    mode: CopyMode,
  ): Promise<{ contentType: string; body: Readable; size?: number }> {
    // A single file's bytes skip the HTTP client (raw-download.ts); a tar's length is not known ahead.
    if (mode === 'binary') {
      const raw = await rawDownload(this.connector(ep), ep, `/cp?${new URLSearchParams({ path, mode })}`, this.helper);
      return { contentType: 'application/octet-stream', ...raw };
    }
    const { res } = await this.http.open(ep, { method: 'GET', path: `/cp?${new URLSearchParams({ path, mode })}` });
    const len = res.headers['content-length'];
    return {
      contentType: String(res.headers['content-type'] ?? 'application/octet-stream'),
      body: res,
      size: len ? Number(len) : undefined,
    };
  }

  async fs(ep: AgentEndpoint, op: FsOp): Promise<FsInfo | FsInfo[] | void> {
    switch (op.op) {
      case 'readdir':
        return this.http.json(ep, {
          method: 'GET',
          path: `/fs/readdir?${new URLSearchParams({ path: op.path })}`,
          timeoutMs: FS_TIMEOUT_MS,
          maxBytes: REPLY_LIMITS.exec,
        });
      case 'stat':
        return this.http.json(ep, {
          method: 'GET',
          path: `/fs/stat?${new URLSearchParams({ path: op.path })}`,
          timeoutMs: FS_TIMEOUT_MS,
        });
      case 'mkdir':
        return this.http.json(ep, {
          method: 'POST',
          path: '/fs/mkdir',
          body: Buffer.from(JSON.stringify({ path: op.path, recursive: op.recursive, mode: op.mode })),
          contentType: 'application/json',
          timeoutMs: FS_TIMEOUT_MS,
        });
      case 'symlink':
        return this.http.json(ep, {
          method: 'POST',
          path: '/fs/symlink',
          body: Buffer.from(JSON.stringify({ path: op.path, target: op.target })),
          contentType: 'application/json',
          timeoutMs: FS_TIMEOUT_MS,
        });
      case 'remove':
        return this.http.json(ep, {
          method: 'DELETE',
          path: `/fs/remove?${new URLSearchParams({ path: op.path, recursive: String(!!op.recursive) })}`,
          timeoutMs: FS_TIMEOUT_MS,
        });
    }
  }

  materialize(ep: AgentEndpoint, req: MaterializeRequest): Promise<{ path: string; mode: string }> {
    return this.http.json(ep, {
      method: 'POST',
      path: '/secrets/materialize',
      body: Buffer.from(JSON.stringify(req)),
      contentType: 'application/json',
      timeoutMs: FS_TIMEOUT_MS,
    });
  }

  /** An upgrade to the agent's PORT_PATH on a connection of its own (domain/agent.ts). */
  async openPort(ep: AgentEndpoint, port: number): Promise<Duplex> {
    const socket = this.connector(ep);
    socket.write(
      `GET ${PORT_PATH}?port=${port} HTTP/1.1\r\nHost: ${agentHost(ep)}\r\nConnection: Upgrade\r\nUpgrade: ${PORT_UPGRADE}\r\n\r\n`,
    );
    const head = await readHead(socket, ep);
    if (head.status !== 101) throw fromStatus(head.status, await readError(socket, head));
    if (head.rest.length) socket.unshift(head.rest);
    socket.resume();
    return socket;
  }

  async shell(ep: AgentEndpoint, opts: ShellOptions): Promise<Terminal> {
    if (opts.cmd || opts.cwd || (opts.env && Object.keys(opts.env).length))
      await this.checkFeatures(ep, [
        [
          'shell_cmd',
          'opens only a login shell in a terminal (an older agent): use svc sh, or exec without a terminal',
        ],
      ]);
    const p = formatShellQuery(opts);
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(`ws://${ep.host}:${ep.port}/shell?${p}`, {
        perMessageDeflate: false,
        handshakeTimeout: CONNECT_TIMEOUT_MS,
        maxPayload: REPLY_LIMITS.shellMessage,
        createConnection: () => this.connector(ep) as never,
      });
      // What comes before the terminal is joined to its client (a command quicker than the
      // upgrade: its output, its end) is kept for the first listener, not dropped.
      const dataListeners: ((d: Buffer) => void)[] = [];
      const early: Buffer[] = [];
      const exitListeners: ((c: number | null) => void)[] = [];
      let exitCode: number | null = null;
      let closed = false;
      ws.on('unexpected-response', (_r, res) => {
        void this.http.readAll(res, ep).then((text) => reject(fromStatus(res.statusCode ?? 0, text)), reject);
      });
      ws.once('error', (err) => reject(unavailable(ep, err)));
      ws.on('message', (data, isBinary) => {
        const buf = Buffer.isBuffer(data) ? data : Buffer.concat(data as Buffer[]);
        if (isBinary) {
          if (!dataListeners.length) early.push(buf);
          for (const l of dataListeners) l(buf);
        } else {
          try {
            const m = JSON.parse(buf.toString('utf8')) as { type?: string; exit_code?: number };
            if (m.type === 'exit') exitCode = m.exit_code ?? null;
          } catch {
            // ignore malformed control frames
          }
        }
      });
      ws.on('close', () => {
        closed = true;
        for (const l of exitListeners.splice(0)) l(exitCode);
      });
      ws.once('open', () => {
        ws.on('error', () => ws.terminate());
        resolve({
          write: (d) => {
            if (ws.readyState === ws.OPEN) ws.send(d, { binary: true });
          },
          resize: (cols, rows) => {
            if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ type: 'resize', cols, rows }));
          },
          onData: (l) => {
            dataListeners.push(l);
            for (const b of early.splice(0)) l(b);
          },
          onExit: (l) => (closed ? l(exitCode) : void exitListeners.push(l)),
          close: () => ws.close(),
        });
      });
    });
  }

  async setIdentity(ep: AgentEndpoint, id: GuestIdentity): Promise<void> {
    await this.tell(ep, 'POST', '/identity', id);
  }

  async setEgress(ep: AgentEndpoint, egress: GuestEgress): Promise<void> {
    await this.tell(ep, 'PUT', '/egress', egress);
  }

  /** Sends the guest a JSON body it answers without one (what it is, not a command to run). */
  private async tell(ep: AgentEndpoint, method: 'POST' | 'PUT', path: string, value: unknown): Promise<void> {
    await this.http.json(ep, {
      method,
      path,
      body: Buffer.from(JSON.stringify(value)),
      contentType: 'application/json',
      timeoutMs: 10_000,
    });
  }

  /** Closes kept-alive connections (daemon stop). */
  close(): void {
    this.channels.close();
    this.http.close();
  }
}

const FRAME_TYPES = new Set(['started', 'stdout', 'stderr', 'exit', 'error']);

/** A frame the daemon passes on has a known type and fields of the right kinds. */
function isFrame(f: unknown): f is ExecFrame {
  if (typeof f !== 'object' || f === null) return false;
  const x = f as Record<string, unknown>;
  if (typeof x.type !== 'string' || !FRAME_TYPES.has(x.type)) return false;
  if ((x.type === 'stdout' || x.type === 'stderr') && typeof x.data !== 'string') return false;
  return x.type !== 'exit' || typeof x.exit_code === 'number';
}
