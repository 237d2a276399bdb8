import { existsSync } from 'node:fs';
import { unlink } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { parseEgressPolicy } from '../../domain/egress.js';
import type { PortForward } from '../../domain/vm.js';
import { socketAnswers } from '../fs-kit/socket-file.js';
import { NetdVms, NetError, type NetdVmsOptions } from './netd-vms.js';
import { MAX_LINE, NETD_PROTOCOL, type NetHello, type NetRequest } from './protocol.js';

/** The control socket's and the process's options; the rest are the networks' (NetdVmsOptions). */
export interface NetdOptions extends Omit<NetdVmsOptions, 'broadcast'> {
  /** The control socket (created 0600). */
  control: string;
  /** What build this is (the daemon restarts an svc-netd of another build). */
  build: string;
  /** With no VM and no client for this long, the process exits (0: never). */
  idleExitMs?: number;
  /** Called once the server should end (shutdown asked, the control socket gone, idle). */
  exit: () => void;
}

/**
 * svc-netd: the networks of every VM on this host (GuestLan each), outside the daemon's process
 * so that a daemon restart does not cut a guest's connections. The daemon drives it over a
 * control socket (protocol.ts); what it was asked to keep is written to a state file, and a
 * restarted svc-netd connects to the VMs' links again and binds their forwards again.
 */
export class NetdServer {
  private readonly vms: NetdVms;
  private readonly clients = new Set<Socket>();
  private server: Server | undefined;
  private idleSince = Date.now();
  private watch: NodeJS.Timeout | undefined;

  constructor(private readonly o: NetdOptions) {
    this.vms = new NetdVms({
      ...o,
      broadcast: (line) => {
        for (const c of this.clients) if (!c.destroyed) c.write(line);
      },
    });
  }

  async start(): Promise<void> {
    // Another svc-netd answering here keeps the socket; a stale file is replaced.
    if (await socketAnswers(this.o.control)) throw new Error(`svc-netd already runs at ${this.o.control}`);
    await unlink(this.o.control).catch(() => undefined);
    const server = createServer((s) => this.client(s));
    const mask = process.umask(0o177);
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(this.o.control, () => resolve());
      });
    } finally {
      process.umask(mask);
    }
    this.server = server;
    await this.vms.restore();
    this.watch = setInterval(() => this.checkExit(), 2000);
    this.watch.unref();
  }

  private checkExit(): void {
    if (!existsSync(this.o.control)) {
      this.o.log.warn({ control: this.o.control }, 'control socket removed; exiting');
      return this.o.exit();
    }
    const idle = !this.vms.size && !this.clients.size;
    if (!idle) this.idleSince = Date.now();
    else if (this.o.idleExitMs && Date.now() - this.idleSince > this.o.idleExitMs) {
      this.o.log.info({}, 'no vms and no daemon; exiting');
      this.o.exit();
    }
  }

  private client(s: Socket): void {
    this.clients.add(s);
    let buf = '';
    s.setEncoding('utf8');
    s.on('data', (d: string) => {
      buf += d;
      if (buf.length > MAX_LINE) return void s.destroy();
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        void this.request(s, line);
      }
    });
    s.on('error', () => undefined);
    s.on('close', () => this.clients.delete(s));
  }

  private async request(s: Socket, line: string): Promise<void> {
    let id = 0;
    try {
      const msg = JSON.parse(line) as NetRequest & { id: number };
      id = msg.id;
      const result = await this.handle(msg);
      if (!s.destroyed) s.write(JSON.stringify({ id, ok: true, result }) + '\n');
    } catch (err) {
      const e = err as Error & { code?: string };
      if (!s.destroyed)
        s.write(
          JSON.stringify({
            id,
            ok: false,
            error: e.message,
            code: e instanceof NetError ? e.code : e.code === 'EADDRINUSE' ? 'in_use' : 'internal',
          }) + '\n',
        );
    }
  }

  private async handle(req: NetRequest): Promise<unknown> {
    switch (req.op) {
      case 'hello':
        return { protocol: NETD_PROTOCOL, build: this.o.build, pid: process.pid } satisfies NetHello;
      case 'attach':
        return {
          forwards: withPid(
            await this.vms.attach({ ...req.attachment, policy: parseEgressPolicy(req.attachment.policy) }),
          ),
        };
      case 'detach':
        await this.vms.detach(req.vm);
        return {};
      case 'secrets':
        return { ca_pem: await this.vms.secrets(req.vm, req.secrets) };
      case 'rename':
        await this.vms.rename(req.from, req.to, req);
        return {};
      case 'policy':
        await this.vms.setPolicy(req.vm, req.policy);
        return {};
      case 'forward':
        return { forwards: withPid(await this.vms.forward(req.vm, req.forwards)) };
      case 'unforward':
        return { removed: await this.vms.unforward(req.vm, req.host_port, req.proto) };
      case 'list':
        return this.vms.list();
      case 'shutdown':
        await this.vms.save();
        setImmediate(() => this.o.exit());
        return {};
      default:
        throw new NetError(`unknown op ${(req as { op: string }).op}`, 'invalid');
    }
  }

  /**
   * Ends the server. The state file is not written again: every change wrote it before it was
   * answered, and a server that exits because its control socket is gone (its data directory being
   * removed, a test's among them) must not put a file back into that directory.
   */
  async stop(): Promise<void> {
    clearInterval(this.watch);
    await this.vms.close();
    for (const c of this.clients) c.destroy();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }
}

/** Forwards as this process carries them (their `pid` is svc-netd's). */
const withPid = (forwards: PortForward[]) => forwards.map((f) => ({ ...f, pid: process.pid }));
