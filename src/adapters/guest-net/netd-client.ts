import { spawn } from 'node:child_process';
import { closeSync, openSync, statSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AlreadyExistsError, InternalError, NotFoundError, UnavailableError } from '../../domain/errors.js';
import type { EgressEvent } from '../../domain/egress.js';
import type { Logger } from '../../ports/logger.js';
import { VERSION } from '../../version.js';
import { capLog } from '../fs-kit/log-cap.js';
import { childEnv } from '../process-kit/child-env.js';
import { MAX_LINE, NETD_PROTOCOL, type NetAnswer, type NetHello, type NetRequest } from '../netd/protocol.js';

const CALL_TIMEOUT_MS = 20_000;
const START_TIMEOUT_MS = 10_000;

export interface NetdClientOptions {
  /** svc-netd's control socket, state file and log live here (the daemon's data dir). */
  dataDir: string;
  log: Logger;
  /** The svc-netd program (default: the one built beside this daemon). */
  script?: string;
  /** Resolvers for guests (config guest_dns); empty: the host's. */
  dns?: string[];
  /** Certificates egress secrets' upstreams may lead to besides the host's (config egress_upstream_ca). */
  upstreamCa?: string;
}

/**
 * The daemon's line to svc-netd: it finds the process on its control socket, starts it when none
 * answers (detached: it outlives the daemon, like QEMU), and starts it anew when one of another
 * build answers (that one saves its state and exits; the new one takes its VMs' networks back).
 * A call on a line that broke reconnects, and so does a lost connection while egress is followed.
 */
export class NetdClient {
  readonly control: string;
  private readonly script: string;
  private sock: Socket | undefined;
  private connecting: Promise<Socket> | undefined;
  private nextId = 0;
  private readonly pending = new Map<
    number,
    { resolve: (v: unknown) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }
  >();
  private readonly listeners = new Set<(e: EgressEvent) => void>();
  private closed = false;

  constructor(private readonly o: NetdClientOptions) {
    this.control = join(o.dataDir, 'netd.sock');
    this.script = o.script ?? fileURLToPath(new URL('../../bin/svc-netd.js', import.meta.url));
  }

  /** This daemon's idea of svc-netd's build: another build answering is replaced. */
  private build(): string {
    let stamp = '0';
    try {
      stamp = String(Math.floor(statSync(this.script).mtimeMs));
    } catch {
      // no script: the start below says so
    }
    // Resolvers are the process's: another list is another build to replace.
    return `${VERSION}/${NETD_PROTOCOL}/${stamp}/${(this.o.dns ?? []).join(',')}/${this.o.upstreamCa ?? ''}`;
  }

  async call<T>(req: NetRequest): Promise<T> {
    // A daemon that stopped says nothing more to svc-netd: a late call of its own (a process of
    // it that ended) must not reach the VMs' networks a new daemon runs now.
    if (this.closed) throw new UnavailableError(`svc-netd: this daemon's line is closed (${req.op} not sent)`);
    const sock = await this.line();
    const id = ++this.nextId;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new InternalError(`svc-netd did not answer ${req.op} within ${CALL_TIMEOUT_MS / 1000} s`));
      }, CALL_TIMEOUT_MS);
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer });
      sock.write(JSON.stringify({ id, ...req }) + '\n');
    });
  }

  /** Egress decisions as svc-netd makes them. The line is kept open (and reopened) while anyone listens. */
  onEgress(listener: (e: EgressEvent) => void): () => void {
    this.listeners.add(listener);
    if (!this.closed)
      void this.line().catch((err: Error) => this.o.log.warn({ err: err.message }, 'cannot reach svc-netd'));
    return () => this.listeners.delete(listener);
  }

  /** Lets go of the line for good (the daemon stops); svc-netd and the VMs' networks go on. */
  close(): void {
    this.closed = true;
    this.sock?.destroy();
  }

  private line(): Promise<Socket> {
    if (this.sock && !this.sock.destroyed) return Promise.resolve(this.sock);
    this.connecting ??= this.open().finally(() => (this.connecting = undefined));
    return this.connecting;
  }

  private async open(): Promise<Socket> {
    let sock = await tryConnect(this.control);
    if (sock) {
      const hello = await this.hello(sock);
      if (hello.build !== this.build()) {
        this.o.log.info(
          { running: hello.build, ours: this.build(), pid: hello.pid },
          'svc-netd of another build runs; replacing it',
        );
        await this.hello(sock, 'shutdown');
        sock.destroy();
        await waitGone(hello.pid);
        sock = undefined;
      }
    }
    if (!sock) sock = await this.start();
    this.adopt(sock);
    return sock;
  }

  /** Sends one request on a socket not yet adopted and reads its answer (the handshake). */
  private hello(sock: Socket, op: 'hello' | 'shutdown' = 'hello'): Promise<NetHello> {
    return new Promise((resolve, reject) => {
      let buf = '';
      const timer = setTimeout(() => done(new Error('svc-netd did not answer hello')), 5000);
      const done = (err?: Error, v?: NetHello) => {
        clearTimeout(timer);
        sock.off('data', onData);
        if (err) reject(err);
        else resolve(v!);
      };
      const onData = (d: Buffer) => {
        buf += d.toString('utf8');
        const nl = buf.indexOf('\n');
        if (nl < 0) return;
        const m = JSON.parse(buf.slice(0, nl)) as NetAnswer;
        if (m.ok) done(undefined, m.result as NetHello);
        else done(new Error(m.error));
      };
      sock.on('data', onData);
      sock.once('error', (e) => done(e));
      sock.write(JSON.stringify({ id: 0, op }) + '\n');
    });
  }

  private async start(): Promise<Socket> {
    const logFile = join(this.o.dataDir, 'netd.log');
    await capLog(logFile, 4 << 20).catch(() => undefined);
    const fd = openSync(logFile, 'a', 0o600);
    try {
      const child = spawn(
        process.execPath,
        [
          this.script,
          '--control',
          this.control,
          '--state',
          join(this.o.dataDir, 'netd.json'),
          '--build',
          this.build(),
          ...(this.o.dns?.length ? ['--dns', this.o.dns.join(',')] : []),
          '--secrets',
          this.o.dataDir,
          ...(this.o.upstreamCa ? ['--upstream-ca', this.o.upstreamCa] : []),
        ],
        {
          detached: true,
          stdio: ['ignore', fd, fd],
          env: childEnv(),
        },
      );
      child.on('error', () => undefined);
      child.unref();
      this.o.log.info({ pid: child.pid }, 'svc-netd started');
    } finally {
      closeSync(fd);
    }
    const until = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      const sock = await tryConnect(this.control);
      if (sock) {
        await this.hello(sock);
        return sock;
      }
      if (Date.now() > until) throw new InternalError(`svc-netd did not start (see ${logFile})`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  private adopt(sock: Socket): void {
    this.sock = sock;
    let buf = '';
    sock.setEncoding('utf8');
    sock.on('data', (d: string) => {
      buf += d;
      if (buf.length > MAX_LINE) return void sock.destroy();
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        this.message(line);
      }
    });
    sock.on('error', () => undefined);
    sock.on('close', () => {
      if (this.sock === sock) this.sock = undefined;
      for (const [id, p] of this.pending) {
        clearTimeout(p.timer);
        p.reject(new InternalError('lost the line to svc-netd'));
        this.pending.delete(id);
      }
      // Followers keep following: a new line (a restarted svc-netd, if need be) after a moment.
      if (!this.closed && this.listeners.size) setTimeout(() => void this.line().catch(() => undefined), 500).unref();
    });
  }

  private message(line: string): void {
    let m: (NetAnswer & { event?: undefined }) | { event: 'egress'; entry: EgressEvent };
    try {
      m = JSON.parse(line);
    } catch {
      return;
    }
    if (m.event === 'egress') {
      for (const l of this.listeners) l(m.entry);
      return;
    }
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    clearTimeout(p.timer);
    if (m.ok) p.resolve(m.result);
    else
      p.reject(
        m.code === 'not_found'
          ? new NotFoundError(m.error)
          : m.code === 'in_use'
            ? new AlreadyExistsError(m.error)
            : new InternalError(`svc-netd: ${m.error}`),
      );
  }
}

function tryConnect(path: string): Promise<Socket | undefined> {
  return new Promise((resolve) => {
    const s = connect(path);
    s.once('connect', () => {
      s.removeAllListeners('error');
      resolve(s);
    });
    s.once('error', () => resolve(undefined));
  });
}

async function waitGone(pid: number): Promise<void> {
  for (let i = 0; i < 100; i++) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
