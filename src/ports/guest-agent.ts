import type { UploadQuery } from '../domain/query.js';
import type { Duplex, Readable } from 'node:stream';
import type {
  AgentHealth,
  CopyMode,
  GuestEgress,
  GuestIdentity,
  ExecFrame,
  ExecRequest,
  ExecResult,
  FsInfo,
  GuestStats,
  MaterializeRequest,
  Readiness,
  TerminalRequest,
} from '../domain/agent.js';
import type { Terminal } from './terminal.js';

/**
 * Where a VM's agent answers, as its driver reaches it: a host TCP port (svc-netd's forward), a
 * vsock CID (the host's vhost-vsock), or a Unix socket that speaks hybrid vsock (`socket`: the
 * VMM's, Cloud Hypervisor's or Firecracker's; connect, send `CONNECT <port>`, read `OK ...`).
 */
export interface AgentEndpoint {
  host: string;
  port: number;
  cid?: number;
  socket?: string;
}

/**
 * Where and how an upload lands: the cp query, shared with the agent, and the body's length when
 * the caller declared one (the daemon then passes the body on as is, without chunked framing).
 */
export type UploadOptions = UploadQuery & { size?: number };

/** A terminal's request: a shell, or a command in it (domain/agent.ts). */
export type ShellOptions = TerminalRequest;

export type FsOp =
  | { op: 'readdir'; path: string }
  | { op: 'stat'; path: string }
  | { op: 'mkdir'; path: string; recursive?: boolean; mode?: string }
  | { op: 'symlink'; path: string; target: string }
  | { op: 'remove'; path: string; recursive?: boolean };

export const GuestAgent = Symbol('GuestAgent');
/**
 * Talks to the agent inside one guest. Every method throws AgentUnavailableError when the agent
 * cannot be reached (refused, timed out), AgentFailureError when it answers garbage or 5xx, and
 * passes the agent's own 400/404 through as InvalidArgumentError/NotFoundError.
 */
export interface GuestAgent {
  /** Idempotent. `timeoutMs` bounds the whole call (readiness probes use ~500 ms). */
  health(ep: AgentEndpoint, timeoutMs?: number): Promise<AgentHealth>;
  readiness(ep: AgentEndpoint): Promise<Readiness>;
  stats(ep: AgentEndpoint): Promise<GuestStats>;
  /** `signal` aborts the call (the caller went away): the agent's connection is dropped, which kills the command. */
  exec(ep: AgentEndpoint, req: ExecRequest, stdin?: Readable, signal?: AbortSignal): Promise<ExecResult>;
  /** Frames as they arrive; breaking out of the loop, or `signal`, kills the remote command. */
  execStream(ep: AgentEndpoint, req: ExecRequest, stdin?: Readable, signal?: AbortSignal): AsyncIterable<ExecFrame>;
  /** Streams `body` into the guest with backpressure. */
  upload(ep: AgentEndpoint, opts: UploadOptions, body: Readable): Promise<void>;
  /** A stream of the guest file (binary) or tar; the caller must consume or destroy it. */
  download(ep: AgentEndpoint, path: string, mode: CopyMode): Promise<{ contentType: string; body: Readable }>;
  fs(ep: AgentEndpoint, op: FsOp): Promise<FsInfo | FsInfo[] | void>;
  materialize(ep: AgentEndpoint, req: MaterializeRequest): Promise<{ path: string; mode: string }>;
  shell(ep: AgentEndpoint, opts: ShellOptions): Promise<Terminal>;
  /**
   * A byte stream to TCP `port` on the guest's loopback (domain/agent.ts, PORT_PATH), for the
   * caller to speak the port's protocol over; destroying it closes the guest's connection.
   * NotFoundError when nothing listens there.
   */
  openPort(ep: AgentEndpoint, port: number): Promise<Duplex>;
  /** Gives the guest its identity (hostname, clock, machine id). Idempotent. */
  setIdentity(ep: AgentEndpoint, id: GuestIdentity): Promise<void>;
  /** Gives the guest its egress secrets' CA and placeholder variables (docs/egress-secrets.md). Idempotent. */
  setEgress(ep: AgentEndpoint, egress: GuestEgress): Promise<void>;

  /** The daemon is stopping: drops kept-alive connections. Idempotent. */
  close(): void;
}

/**
 * A download's body may offer to move its remaining bytes to the client's connection itself (an
 * adapter that can copy socket to socket without passing the bytes through its process). Whoever answers the client sends the
 * answer's head, then calls it with the connection: `true` when every byte went (end the answer
 * without a body), `false` when it declined and nothing was taken (pipe the body as usual); a
 * rejection means the copy broke off part way and the connection must be dropped.
 */
export const SEND_RAW = Symbol('svc.send-raw');
export interface RawSendable {
  [SEND_RAW](connection: Duplex): Promise<boolean>;
}

/**
 * An upload's body may offer its connection itself: the client's socket, reads stopped, and what
 * was read of the body already. Whoever takes it writes `pending`, then the rest of the declared
 * length straight from `connection`; the client's connection closes after the answer. Undefined
 * when it cannot be offered (nothing is taken then).
 */
export const TAKE_RAW = Symbol('svc.take-raw');
export interface RawTakeable {
  [TAKE_RAW](): { connection: Duplex; pending: Buffer } | undefined;
}

/** A raw byte pipe to a guest port; adapters that can offer one (for shell proxying) implement it. */
export type RawStream = Duplex;
