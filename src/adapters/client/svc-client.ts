import type { Readable } from 'node:stream';
import type {
  AgentHealth,
  CopyMode,
  ExecFrame,
  ExecRequest,
  ExecResult,
  FsInfo,
  GuestStats,
} from '../../domain/agent.js';
import { formatExecQuery } from '../../domain/query.js';
import type { CreateRequest, ShapeChange, WaitMode } from '../../domain/create-request.js';
import type {
  ActivityEvent,
  CreateProgressEvent,
  ImageBuildEvent,
  MetricsPoint,
  SecretRecord,
  VmEvent,
} from '../../domain/events.js';
import { LOG_OFFSET_HEADER, type Forward, type Instance, type Mount, type PortForward } from '../../domain/vm.js';
import type { EgressEvent, EgressPolicy } from '../../domain/egress.js';
import type { OnExpire } from '../../domain/lifetime.js';
import type { EgressSecretBinding, EgressSecretSpec } from '../../domain/egress-secrets.js';
import {
  TIMELINE_HEADER,
  type OutputFrame,
  type ProcessInfo,
  type ProcessStart,
  type ProcessStream,
} from '../../domain/processes.js';
import type { WatchEvent, WatchInfo } from '../../domain/watches.js';
import { movedBack } from '../../domain/timeline.js';
import type { ImageDetails } from '../../ports/guest-images.js';
import type { ClusterInstance, NodeView, PlacementAsk } from '../../domain/cluster.js';
import type { DrainResult } from '../../domain/move.js';
import type { SnapshotRequest, VmSnapshot } from '../../domain/snapshots.js';
import { enc, qs, SvcTransport } from './svc-transport.js';

export {
  apiUrl,
  DaemonUnreachableError,
  noneOn404,
  SvcError,
  type ShellConnection,
  type SvcClientOptions,
} from './svc-transport.js';

export type CreateInput = Partial<Omit<CreateRequest, 'forwards' | 'mounts' | 'ttl_ms'>> & {
  forwards?: Partial<PortForward>[];
  mounts?: Mount[];
  /** Its lifetime: whole seconds or a duration such as `30m` (docs/api.md, "Lifetime"). */
  ttl?: number | string;
} & PlacementAsk;
export interface CreateOptions {
  wait?: WaitMode | 'true' | '1';
  timeout?: string;
}
export interface MetricsHistoryResponse {
  name: string;
  enabled: boolean;
  interval_sec: number;
  capacity: number;
  points: MetricsPoint[];
}
export interface Message {
  message: string;
  name: string;
}

const execQuery = (r: ExecRequest, buffered: boolean) => `?${formatExecQuery(r, buffered)}`;

/**
 * A typed client of every svcd route, over the Unix socket (default) or http(s). Streams are
 * AsyncIterables (create progress, exec frames, logs) and Node streams (cp); errors are SvcError.
 */
export class SvcClient extends SvcTransport {
  // --- system
  healthz(): Promise<{ status: string }> {
    return this.call('GET', '/healthz');
  }
  info(): Promise<{ name: string; version: string; api_version: string; hypervisor: string }> {
    return this.call('GET', '/info');
  }
  metricsText(): Promise<string> {
    return this.call('GET', '/metrics');
  }
  openapi(format: 'yaml' | 'json' = 'yaml'): Promise<string> {
    return this.call('GET', `/openapi.${format}`);
  }
  async activity(o: { limit?: number; since?: number } = {}): Promise<ActivityEvent[]> {
    return (await this.call<{ events: ActivityEvent[] }>('GET', `/activity${qs(o)}`)).events;
  }

  /**
   * The VM change feed (GET /events): a `snapshot`, then `vm` / `removed` lines and `ping`s, until
   * `signal` aborts or the daemon goes.
   */
  async *events(o: { signal?: AbortSignal } = {}): AsyncIterable<VmEvent> {
    const res = await this.raw('GET', '/events');
    this.endOnAbort(res, o.signal);
    try {
      yield* this.lines<VmEvent>(res);
    } catch (err) {
      if (!o.signal?.aborted) throw err;
    }
  }

  // --- lifecycle
  list(): Promise<Instance[]> {
    return this.call('GET', '/vms');
  }
  get(name: string): Promise<Instance> {
    return this.call('GET', `/vms/${enc(name)}`);
  }
  create(req: CreateInput = {}, o: CreateOptions = {}): Promise<Instance> {
    return this.call('POST', `/vms${qs({ wait: o.wait, timeout: o.timeout })}`, req);
  }
  async *createStream(req: CreateInput = {}, o: CreateOptions = {}): AsyncIterable<CreateProgressEvent> {
    const body = Buffer.from(JSON.stringify(req));
    yield* this.lines<CreateProgressEvent>(
      await this.raw('POST', `/vms${qs({ stream: '1', wait: o.wait, timeout: o.timeout })}`, body, {
        'content-type': 'application/json',
      }),
    );
  }
  delete(name: string): Promise<Message> {
    return this.call('DELETE', `/vms/${enc(name)}`);
  }
  /** Clones a stopped or suspended persistent VM (from its snapshot when it has one). */
  clone(template: string, req: Omit<CreateInput, 'from' | 'from_pool'> = {}, o: CreateOptions = {}): Promise<Instance> {
    return this.call('POST', `/vms/${enc(template)}/clone${qs({ wait: o.wait, timeout: o.timeout })}`, req);
  }
  /** Forks a running or paused VM into `count` copies (or one per name); all of them or none. */
  fork(
    name: string,
    req: { count?: number; names?: string[]; tags?: Record<string, string>; persistent?: boolean } = {},
    o: CreateOptions = {},
  ): Promise<{ source: string; paused_ms: number; vms: Instance[] }> {
    return this.call('POST', `/vms/${enc(name)}/fork${qs({ wait: o.wait, timeout: o.timeout })}`, req);
  }
  listImages(): Promise<ImageDetails[]> {
    return this.call('GET', '/images');
  }
  buildImage(req: Record<string, unknown>): Promise<ImageDetails> {
    return this.call('POST', '/images', req);
  }
  async *buildImageStream(req: Record<string, unknown>): AsyncIterable<ImageBuildEvent> {
    yield* this.lines<ImageBuildEvent>(
      await this.raw('POST', '/images?stream=1', Buffer.from(JSON.stringify(req)), {
        'content-type': 'application/json',
      }),
    );
  }
  getImage(id: string): Promise<ImageDetails> {
    return this.call('GET', `/images/${enc(id)}`);
  }
  /** What a pull of `from` (`docker://REF`) would take now: the digest its tag points at. */
  resolveImage(
    from: string,
    registryAuth?: { username: string; password: string },
  ): Promise<{ from: string; digest: string }> {
    return this.call('POST', '/images/resolve', { from, ...(registryAuth ? { registry_auth: registryAuth } : {}) });
  }
  deleteImage(id: string): Promise<{ message: string; id: string }> {
    return this.call('DELETE', `/images/${enc(id)}`);
  }
  pool(): Promise<{
    template: string;
    size: number;
    running: boolean;
    ready: number;
    members: { name: string; status: string }[];
  }> {
    return this.call('GET', '/pool');
  }
  /** The nodes of the cluster this daemon is a node of (docs/cluster.md). */
  nodes(): Promise<NodeView[]> {
    return this.call('GET', '/nodes');
  }
  node(node: string): Promise<NodeView> {
    return this.call('GET', `/nodes/${enc(node)}`);
  }
  /** Moves a VM to another node of the cluster (without `node`, the one the placement rule picks); a running one is suspended for it and restored there. */
  move(name: string, node?: string): Promise<ClusterInstance> {
    return this.call('POST', `/vms/${enc(name)}/move`, node === undefined ? {} : { node });
  }
  /** Drains a node: what can move goes to the others, nothing new is placed on it. */
  drain(node: string): Promise<DrainResult> {
    return this.call('POST', `/nodes/${enc(node)}/drain`);
  }
  /** Ends a node's drain: creates may be placed on it again. */
  undrain(node: string): Promise<NodeView> {
    return this.call('DELETE', `/nodes/${enc(node)}/drain`);
  }
  start(name: string): Promise<Instance> {
    return this.call('POST', `/vms/${enc(name)}/start`);
  }
  shutdown(name: string): Promise<Message> {
    return this.call('POST', `/vms/${enc(name)}/shutdown`);
  }
  pause(name: string): Promise<Message> {
    return this.call('POST', `/vms/${enc(name)}/pause`);
  }
  resume(name: string): Promise<Message> {
    return this.call('POST', `/vms/${enc(name)}/resume`);
  }
  suspend(name: string): Promise<Message> {
    return this.call('POST', `/vms/${enc(name)}/suspend`);
  }
  /** `paused`: the guest stays paused once loaded, and wakes at its resume. */
  restore(name: string, options: { paused?: boolean } = {}): Promise<Instance> {
    return this.call('POST', `/vms/${enc(name)}/restore${options.paused ? '?paused=true' : ''}`);
  }
  metricsHistory(name: string, o: { since?: number; limit?: number } = {}): Promise<MetricsHistoryResponse> {
    return this.call('GET', `/vms/${enc(name)}/metrics${qs(o)}`);
  }
  async *logs(
    name: string,
    o: { follow?: boolean; tail?: number; from?: number; signal?: AbortSignal } = {},
  ): AsyncIterable<Buffer> {
    yield* (await this.logsAt(name, o)).chunks;
  }

  /**
   * The console log as `logs` reads it, with `offset`, the byte of the log its first chunk is:
   * `from: offset + bytes read` later goes on right after what was read.
   */
  async logsAt(
    name: string,
    o: { follow?: boolean; tail?: number; from?: number; signal?: AbortSignal } = {},
  ): Promise<{ offset: number; chunks: AsyncIterable<Buffer> }> {
    const res = await this.raw(
      'GET',
      `/vms/${enc(name)}/logs${qs({ follow: o.follow ? 'true' : undefined, tail: o.tail, from: o.from })}`,
    );
    if ((res.statusCode ?? 0) >= 300) await this.fail(res);
    this.endOnAbort(res, o.signal);
    const offset = Number(res.headers[LOG_OFFSET_HEADER.toLowerCase()] ?? o.from ?? 0);
    async function* chunks(): AsyncIterable<Buffer> {
      try {
        for await (const c of res) yield c as Buffer;
      } catch (err) {
        if (!o.signal?.aborted) throw err;
      }
    }
    return { offset, chunks: chunks() };
  }

  /** Changes a stopped VM's CPUs, memory or disk (a disk only grows) for its next boot. */
  edit(name: string, change: ShapeChange): Promise<Instance> {
    return this.call('PATCH', `/vms/${enc(name)}`, change);
  }

  // --- named snapshots (docs/snapshots.md)
  snapshots(name: string): Promise<VmSnapshot[]> {
    return this.call('GET', `/vms/${enc(name)}/snapshots`);
  }
  snapshot(name: string, snapshot: string): Promise<VmSnapshot> {
    return this.call('GET', `/vms/${enc(name)}/snapshots/${enc(snapshot)}`);
  }
  /** Takes a snapshot of the VM as it is now (a running one with its memory). */
  takeSnapshot(name: string, req: SnapshotRequest = {}): Promise<VmSnapshot> {
    return this.call('POST', `/vms/${enc(name)}/snapshots`, req);
  }
  /** Puts the VM back to the snapshot, in place (`warning` when its saved guest cold-booted). */
  revert(name: string, snapshot: string): Promise<Instance & { warning?: string }> {
    return this.call('POST', `/vms/${enc(name)}/snapshots/${enc(snapshot)}/revert`);
  }
  deleteSnapshot(name: string, snapshot: string): Promise<{ message: string; name: string; snapshot: string }> {
    return this.call('DELETE', `/vms/${enc(name)}/snapshots/${enc(snapshot)}`);
  }

  /** Gives the VM a lifetime from now (seconds or a duration such as `30m`), or none (`null`). */
  setTtl(name: string, ttl: number | string | null, onExpire?: OnExpire): Promise<Instance> {
    return this.call('PUT', `/vms/${enc(name)}/ttl`, { ttl, ...(onExpire ? { on_expire: onExpire } : {}) });
  }

  // --- egress (docs/network.md)
  egress(name: string): Promise<EgressPolicy> {
    return this.call('GET', `/vms/${enc(name)}/egress`);
  }
  setEgress(name: string, policy: Partial<EgressPolicy>): Promise<EgressPolicy> {
    return this.call('PUT', `/vms/${enc(name)}/egress`, policy);
  }
  egressSecrets(name: string): Promise<EgressSecretBinding[]> {
    return this.call('GET', `/vms/${enc(name)}/egress/secrets`);
  }
  setEgressSecrets(name: string, bindings: EgressSecretSpec[]): Promise<EgressSecretBinding[]> {
    return this.call('PUT', `/vms/${enc(name)}/egress/secrets`, bindings);
  }
  async egressLog(name: string, o: { limit?: number; since?: number | string } = {}): Promise<EgressEvent[]> {
    return (await this.call<{ events: EgressEvent[] }>('GET', `/vms/${enc(name)}/egress/log${qs(o)}`)).events;
  }
  /** The VM's egress decisions: the last `limit` logged, then each as it happens, until `signal` aborts. */
  async *followEgress(name: string, o: { limit?: number; signal?: AbortSignal } = {}): AsyncIterable<EgressEvent> {
    const res = await this.raw('GET', `/vms/${enc(name)}/egress/log${qs({ follow: 'true', limit: o.limit })}`);
    this.endOnAbort(res, o.signal);
    try {
      yield* this.lines<EgressEvent>(res);
    } catch (err) {
      if (!o.signal?.aborted) throw err;
    }
  }

  // --- durable processes and watches (docs/processes.md)
  startProcess(name: string, p: Omit<ProcessStart, 'args'> & { args?: string[] }): Promise<ProcessInfo> {
    return this.call('POST', `/vms/${enc(name)}/processes`, { args: [], ...p });
  }
  processes(name: string): Promise<ProcessInfo[]> {
    return this.call('GET', `/vms/${enc(name)}/processes`);
  }
  /** By id (`p3`) or tag. */
  process(name: string, ref: string): Promise<ProcessInfo> {
    return this.call('GET', `/vms/${enc(name)}/processes/${enc(ref)}`);
  }
  /**
   * A process's output from `from` (every stream from that byte, or per stream; default 0:
   * everything kept), then, with `follow` (the default), as it comes, until the process ends.
   * When the connection breaks (the daemon restarts, the VM is restored, the network blips) it
   * comes back on its own with the offsets it has seen, for up to `retryMs` (60 s) without
   * news: no byte twice, none skipped but what a `truncated` frame says. If the VM was reverted to
   * a snapshot in between, a `reverted` frame says from which offsets the reverted guest's bytes
   * come again (what was read from there on is not its history). `timeline` goes with `from`, as
   * a process or an earlier read named it. `signal` stops reading (the process runs on).
   */
  async *processOutput(
    name: string,
    ref: string,
    o: {
      from?: number | Partial<Record<ProcessStream, number>>;
      /** The timeline `from` is on (ProcessInfo.timeline). */
      timeline?: string;
      /** Told the timeline each answer's offsets are on (what a later read gives as `timeline`). */
      onTimeline?: (timeline: string) => void;
      /** Instead of `from`: each stream's last N lines (the first frame says where they start). */
      tail?: number;
      follow?: boolean;
      signal?: AbortSignal;
      retryMs?: number;
    } = {},
  ): AsyncIterable<OutputFrame> {
    const pos: Partial<Record<ProcessStream, number>> = typeof o.from === 'object' ? { ...o.from } : {};
    let all = typeof o.from === 'number' ? o.from : undefined;
    let timeline = o.timeline;
    // A tail is asked for until its start is known; a reconnect after that reads on from offsets.
    let tail = o.tail;
    const where = () => {
      if (tail !== undefined) return { tail: String(tail) };
      const parts = Object.entries(pos).map(([s, n]) => `${s}:${n}`);
      return { from: parts.length ? parts.join(',') : all !== undefined ? String(all) : undefined, timeline };
    };
    const follow = o.follow ?? true;
    yield* this.resumable(o, async function* (this: SvcClient) {
      const res = await this.raw(
        'GET',
        `/vms/${enc(name)}/processes/${enc(ref)}/output${qs({ ...where(), follow: follow ? '1' : '0' })}`,
      );
      this.endOnAbort(res, o.signal);
      const on = res.headers[TIMELINE_HEADER];
      if (typeof on === 'string' && res.statusCode === 200) {
        timeline = on;
        o.onTimeline?.(on);
      }
      for await (const f of this.lines<OutputFrame>(res)) {
        if ('reverted' in f) all = movedBack(pos, all, f.reverted.from);
        else if ('start' in f) {
          if (tail === undefined) continue; // only a tail's first frame; not asked for again
          Object.assign(pos, f.start);
          tail = undefined;
        } else if ('stream' in f)
          pos[f.stream] =
            f.offset + (f.encoding === 'base64' ? Buffer.from(f.data, 'base64').length : Buffer.byteLength(f.data));
        else if ('truncated' in f) {
          // a stream that never had a frame starts from its first kept byte
          if ((pos[f.truncated.stream] ?? all ?? 0) < f.truncated.before) pos[f.truncated.stream] = f.truncated.before;
        }
        yield f;
        if ('reason' in f) return true;
      }
      return !follow;
    });
  }
  /** Bytes for a process started with `stdin: true`; `eof` then ends its input. */
  async sendStdin(
    name: string,
    ref: string,
    data: Buffer | string | Readable,
    o: { eof?: boolean } = {},
  ): Promise<void> {
    const body = typeof data === 'string' ? Buffer.from(data) : data;
    const headers: Record<string, string> = { 'content-type': 'application/octet-stream' };
    if (!Buffer.isBuffer(body)) headers['transfer-encoding'] = 'chunked';
    const res = await this.raw(
      'POST',
      `/vms/${enc(name)}/processes/${enc(ref)}/stdin${qs({ eof: o.eof ? '1' : undefined })}`,
      body,
      headers,
    );
    if ((res.statusCode ?? 0) >= 300) await this.fail(res);
    res.resume();
  }
  signalProcess(name: string, ref: string, signal: string | number = 'SIGTERM'): Promise<void> {
    return this.call('POST', `/vms/${enc(name)}/processes/${enc(ref)}/signal`, { signal });
  }
  resizeProcess(name: string, ref: string, cols: number, rows: number): Promise<void> {
    return this.call('POST', `/vms/${enc(name)}/processes/${enc(ref)}/resize`, { cols, rows });
  }
  /** Kills it if it runs, and forgets it. */
  removeProcess(name: string, ref: string): Promise<Message & { id: string }> {
    return this.call('DELETE', `/vms/${enc(name)}/processes/${enc(ref)}`);
  }
  /**
   * A file watch's events: a new watch on `target.path`, or an existing one from `target.from` (a
   * cursor). It comes back on its own with the last cursor when the connection breaks, as
   * processOutput does; the first event of a new watch is `watching` (its id).
   */
  async *watch(
    name: string,
    target: { path: string; recursive?: boolean } | { from: string },
    o: { signal?: AbortSignal; retryMs?: number } = {},
  ): AsyncIterable<WatchEvent> {
    let cursor = 'from' in target ? target.from : undefined;
    yield* this.resumable(o, async function* (this: SvcClient) {
      const q = cursor
        ? { from: cursor }
        : {
            path: (target as { path: string }).path,
            recursive: (target as { recursive?: boolean }).recursive ? '1' : undefined,
          };
      const res = await this.raw('GET', `/vms/${enc(name)}/watch${qs(q)}`);
      this.endOnAbort(res, o.signal);
      for await (const e of this.lines<WatchEvent>(res)) {
        cursor = e.cursor;
        yield e;
      }
      return true;
    });
  }
  watches(name: string): Promise<WatchInfo[]> {
    return this.call('GET', `/vms/${enc(name)}/watches`);
  }
  removeWatch(name: string, id: string): Promise<Message & { id: string }> {
    return this.call('DELETE', `/vms/${enc(name)}/watches/${enc(id)}`);
  }

  // --- forwards
  addForward(name: string, f: { host_port?: number; guest_port: number }): Promise<Forward> {
    return this.call('POST', `/vms/${enc(name)}/forwards`, f);
  }
  removeForward(name: string, hostPort: number): Promise<Message & { host_port: number }> {
    return this.call('DELETE', `/vms/${enc(name)}/forwards/${hostPort}`);
  }

  // --- secrets
  listSecrets(): Promise<SecretRecord[]> {
    return this.call('GET', '/secrets');
  }
  setSecret(s: { name: string; value?: string; data_base64?: string; mode?: string }): Promise<SecretRecord> {
    return this.call('POST', '/secrets', s);
  }
  deleteSecret(name: string): Promise<Message> {
    return this.call('DELETE', `/secrets/${enc(name)}`);
  }
  injectSecret(
    vm: string,
    secret: string,
    o: { path?: string; mode?: string; uid?: number; gid?: number } = {},
  ): Promise<{ name: string; secret: string; path: string; mode: string }> {
    return this.call('POST', `/vms/${enc(vm)}/secrets/${enc(secret)}`, o);
  }

  // --- agent proxy
  agentHealth(name: string): Promise<AgentHealth> {
    return this.call('GET', `/vms/${enc(name)}/agent/health`);
  }
  deployAgent(name: string): Promise<{ name: string; agent_version: string }> {
    return this.call('POST', `/vms/${enc(name)}/agent/deploy`);
  }
  /** The host key of the VM's SSH server, read through its agent (for known_hosts). */
  sshInfo(name: string): Promise<{ host_keys: string[] }> {
    return this.call('GET', `/vms/${enc(name)}/ssh`);
  }
  /** Lets `public_key` (a .pub line) log in as `user` (default root); answers the host key to pin. */
  sshAuthorize(
    name: string,
    r: { public_key: string; user?: string },
  ): Promise<{ user: string; added: boolean; host_keys: string[] }> {
    return this.call('POST', `/vms/${enc(name)}/ssh/keys`, r);
  }
  stats(name: string): Promise<GuestStats> {
    return this.call('GET', `/vms/${enc(name)}/stats`);
  }
  async exec(name: string, r: ExecRequest, stdin?: Readable | Buffer): Promise<ExecResult> {
    const res = await this.raw(
      'POST',
      `/vms/${enc(name)}/exec${execQuery(r, true)}`,
      stdin,
      stdin ? { 'content-type': 'application/octet-stream' } : {},
    );
    if ((res.statusCode ?? 0) >= 300) return this.fail(res);
    return JSON.parse(await this.text(res)) as ExecResult;
  }
  async *execStream(name: string, r: ExecRequest, stdin?: Readable | Buffer): AsyncIterable<ExecFrame> {
    const headers: Record<string, string> = stdin ? { 'content-type': 'application/octet-stream' } : {};
    if (stdin && !Buffer.isBuffer(stdin)) headers['transfer-encoding'] = 'chunked';
    yield* this.lines<ExecFrame>(
      await this.raw('POST', `/vms/${enc(name)}/exec${execQuery(r, false)}`, stdin, headers),
    );
  }
  async upload(
    name: string,
    o: { path: string; mode?: CopyMode; permissions?: string; uid?: number; gid?: number },
    body: Readable | Buffer,
    size?: number,
  ): Promise<void> {
    const mode = o.mode ?? 'binary';
    const headers: Record<string, string> = {
      'content-type': mode === 'tar' ? 'application/x-tar' : 'application/octet-stream',
    };
    if (size !== undefined) headers['content-length'] = String(size);
    const res = await this.raw(
      'PUT',
      `/vms/${enc(name)}/cp${qs({ path: o.path, mode, permissions: o.permissions, uid: o.uid, gid: o.gid })}`,
      body,
      headers,
    );
    if ((res.statusCode ?? 0) >= 300) return this.fail(res);
    res.resume();
  }
  async download(
    name: string,
    path: string,
    mode: CopyMode = 'binary',
  ): Promise<{ body: Readable; size?: number; contentType: string }> {
    const res = await this.raw('GET', `/vms/${enc(name)}/cp${qs({ path, mode })}`);
    if ((res.statusCode ?? 0) >= 300) return this.fail(res);
    const len = res.headers['content-length'];
    return { body: res, size: len ? Number(len) : undefined, contentType: String(res.headers['content-type']) };
  }
  readdir(name: string, path: string): Promise<FsInfo[]> {
    return this.call('GET', `/vms/${enc(name)}/fs/readdir${qs({ path })}`);
  }
  stat(name: string, path: string): Promise<FsInfo> {
    return this.call('GET', `/vms/${enc(name)}/fs/stat${qs({ path })}`);
  }
  mkdir(name: string, path: string, o: { recursive?: boolean; mode?: string } = {}): Promise<void> {
    return this.call('POST', `/vms/${enc(name)}/fs/mkdir`, { path, ...o });
  }
  symlink(name: string, path: string, target: string): Promise<void> {
    return this.call('POST', `/vms/${enc(name)}/fs/symlink`, { path, target });
  }
  remove(name: string, path: string, o: { recursive?: boolean } = {}): Promise<void> {
    return this.call(
      'DELETE',
      `/vms/${enc(name)}/fs/remove${qs({ path, recursive: o.recursive ? 'true' : undefined })}`,
    );
  }
}
