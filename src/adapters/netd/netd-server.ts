import type { PortForward } from '../../domain/vm.js';
import { existsSync } from 'node:fs';
import { readFile, unlink } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { socketAnswers } from '../fs-kit/socket-file.js';
import { parseEgressPolicy } from '../../domain/egress.js';
import type { Logger } from '../../ports/logger.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import { NdjsonLog } from '../fs-kit/ndjson-log.js';
import { DnsUpstream, HostAddresses } from './dns-upstream.js';
import type { EgressEntry } from './egress-guard.js';
import { GuestLan } from './guest-lan.js';
import {
  MAX_LINE,
  NETD_PROTOCOL,
  type NetAttachment,
  type NetHello,
  type NetListed,
  type NetRequest,
  type NetSecrets,
} from './protocol.js';
import { EgressCa, ensureEgressCa } from './egress-ca.js';
import { EgressSecrets, hostTrust, type SecretValues } from './secret-proxy.js';
import { parseEgressSecretBindings } from '../../domain/egress-secrets.js';

/** Each VM's egress log is kept under this, plus one older copy. */
const EGRESS_LOG_MAX = 2 << 20;

export interface NetdOptions {
  /** The control socket (created 0600). */
  control: string;
  /** Where the attachments are kept, so a restarted svc-netd takes its VMs' networks back. */
  state: string;
  /** What build this is (the daemon restarts an svc-netd of another build). */
  build: string;
  log: Logger;
  /** With no VM and no client for this long, the process exits (0: never). */
  idleExitMs?: number;
  /** Called once the server should end (shutdown asked, the control socket gone, idle). */
  exit: () => void;
  /** Resolvers for the guests' allowed queries (HOST[:PORT]); default: the host's /etc/resolv.conf. */
  dns?: string[];
  /** Where egress secrets' values are read, at each request (none: egress secrets are refused). */
  values?: SecretValues;
  /** The certificates an upstream of an egress secret must lead to (default: the host's trust store). */
  trust?: string[];
}

interface Vm {
  a: NetAttachment;
  lan: GuestLan;
  egress: NdjsonLog;
  /** Where the CA of its egress secrets is. */
  ca?: string;
}

function parseNetSecrets(s: NetSecrets | undefined): NetSecrets {
  if (!s || typeof s.ca !== 'string' || !s.ca.startsWith('/'))
    throw new NetError('secrets need {ca, bindings}', 'invalid');
  return { ca: s.ca, bindings: parseEgressSecretBindings(s.bindings) };
}

class NetError extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
  }
}

/**
 * svc-netd: the networks of every VM on this host (GuestLan each), outside the daemon's process
 * so that a daemon restart does not cut a guest's connections. The daemon drives it over a
 * control socket (protocol.ts); what it was asked to keep is written to a state file, and a
 * restarted svc-netd connects to the VMs' links again and binds their forwards again.
 */
export class NetdServer {
  private readonly vms = new Map<string, Vm>();
  private readonly clients = new Set<Socket>();
  private readonly upstream: DnsUpstream;
  private readonly hostAddresses = new HostAddresses();
  private server: Server | undefined;
  private idleSince = Date.now();
  private watch: NodeJS.Timeout | undefined;
  private saving: Promise<void> = Promise.resolve();
  /** Detaches whose egress log and state file are still being written, by VM. */
  private readonly detaching = new Map<string, Promise<void>>();
  private trust: string[] | undefined;

  constructor(private readonly o: NetdOptions) {
    this.upstream = new DnsUpstream(o.dns ?? []);
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
    await this.restore();
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

  /** The attachments of the state file, taken back (a VM whose link is gone is dropped). */
  private async restore(): Promise<void> {
    const saved = JSON.parse(await readFile(this.o.state, 'utf8').catch(() => '{"vms":[]}')) as {
      vms?: NetAttachment[];
    };
    for (const a of saved.vms ?? []) {
      try {
        await this.attach({ ...a, policy: parseEgressPolicy(a.policy) }, 2000);
        this.o.log.info({ vm: a.vm }, 'network taken back');
      } catch (err) {
        this.o.log.warn({ vm: a.vm, err: (err as Error).message }, 'network not taken back');
      }
    }
    await this.save();
  }

  private save(): Promise<void> {
    const vms = [...this.vms.values()].map((v) => v.a);
    this.saving = this.saving
      .then(() => writeFileAtomic(this.o.state, JSON.stringify({ vms }, null, 1)))
      .catch((err: Error) => this.o.log.error({ err: err.message }, 'cannot write the state file'));
    return this.saving;
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

  private vm(name: string): Vm {
    const v = this.vms.get(name);
    if (!v) throw new NetError(`no network for vm ${name}`, 'not_found');
    return v;
  }

  private async handle(req: NetRequest): Promise<unknown> {
    switch (req.op) {
      case 'hello':
        return { protocol: NETD_PROTOCOL, build: this.o.build, pid: process.pid } satisfies NetHello;
      case 'attach':
        return {
          forwards: withPid(await this.attach({ ...req.attachment, policy: parseEgressPolicy(req.attachment.policy) })),
        };
      case 'detach': {
        const v = this.vms.get(req.vm);
        if (v) {
          this.vms.delete(req.vm);
          v.lan.close();
          v.lan.secrets?.close();
          const done = v.egress.flush().then(() => this.save());
          this.detaching.set(req.vm, done);
          await done.finally(() => this.detaching.delete(req.vm));
        } else {
          // Detached already (a second call for one VM, as when a QEMU's end and its destroy both
          // say so): answered once the first one's log and state file are written, so an answer
          // always means the state file says so (a CI run saw netd.json written after the daemon
          // had stopped, while its data dir was being removed).
          await this.detaching.get(req.vm);
        }
        return {};
      }
      case 'secrets': {
        const v = this.vm(req.vm);
        const secrets = parseNetSecrets(req.secrets);
        const caPem = secrets.bindings.length ? await ensureEgressCa(secrets.ca, req.vm) : undefined;
        this.setSecrets(v, secrets);
        await this.save();
        return { ca_pem: caPem };
      }
      case 'rename': {
        const v = this.vm(req.from);
        if (this.vms.has(req.to)) throw new NetError(`vm ${req.to} has a network already`, 'exists');
        this.vms.delete(req.from);
        // Its secrets were the old VM's (a pool member's, a spare's): the new one sets its own.
        this.setSecrets(v, undefined);
        v.a = { ...v.a, vm: req.to, log: req.log, socket: req.socket, secrets: undefined };
        await v.egress.moveTo(req.log);
        this.vms.set(req.to, v);
        await this.save();
        return {};
      }
      case 'policy': {
        const v = this.vm(req.vm);
        const policy = parseEgressPolicy(req.policy);
        v.lan.setPolicy(policy);
        v.a = { ...v.a, policy };
        await this.save();
        return {};
      }
      case 'forward': {
        const v = this.vm(req.vm);
        const added = await v.lan.forwards.add(req.forwards);
        v.a = { ...v.a, forwards: v.lan.forwards.list() };
        await this.save();
        return { forwards: withPid(added) };
      }
      case 'unforward': {
        const v = this.vm(req.vm);
        const removed = v.lan.forwards.remove(req.host_port, req.proto);
        v.a = { ...v.a, forwards: v.lan.forwards.list() };
        await this.save();
        return { removed };
      }
      case 'list':
        return [...this.vms.values()].map((v) => ({ ...v.a, ...v.lan.stats() }) satisfies NetListed);
      case 'shutdown':
        await this.save();
        setImmediate(() => this.o.exit());
        return {};
      default:
        throw new NetError(`unknown op ${(req as { op: string }).op}`, 'invalid');
    }
  }

  /**
   * Attaches (or updates) a VM's network: its link connected, its forwards bound (the ones it had
   * and no longer has are closed), its policy set. Resolves with the forwards as bound.
   */
  private async attach(a: NetAttachment, linkTimeoutMs = 10_000): Promise<PortForward[]> {
    let v = this.vms.get(a.vm);
    if (!v) {
      const egress = new NdjsonLog(a.log, EGRESS_LOG_MAX);
      const vm = a.vm;
      const lan = new GuestLan({
        vm,
        policy: a.policy,
        upstream: this.upstream,
        hostAddresses: this.hostAddresses,
        audit: (e) => this.audit(vm, e),
        secretValue: this.o.values ? (n) => this.o.values!.value(n) : undefined,
      });
      v = { a, lan, egress };
      try {
        await lan.connect(a.socket, linkTimeoutMs);
      } catch (err) {
        lan.close();
        throw err;
      }
      this.vms.set(a.vm, v);
    } else {
      await v.lan.connect(a.socket, linkTimeoutMs);
      v.lan.setPolicy(a.policy);
      await v.egress.moveTo(a.log);
    }
    const vm = v;
    const want = new Set(a.forwards.filter((f) => f.host_port).map((f) => `${f.proto}:${f.host_port}`));
    for (const f of vm.lan.forwards.list())
      if (!want.has(`${f.proto}:${f.host_port}`)) vm.lan.forwards.remove(f.host_port, f.proto);
    let bound: PortForward[];
    try {
      bound = await bindRetrying(() => vm.lan.forwards.add(a.forwards));
    } catch (err) {
      if (!this.vms.get(a.vm)?.a.forwards.length) {
        this.vms.delete(a.vm);
        vm.lan.close();
      }
      throw err;
    }
    vm.a = { ...a, vm: a.vm, forwards: vm.lan.forwards.list(), secrets: vm.a.secrets };
    if (a.secrets) {
      try {
        this.setSecrets(vm, parseNetSecrets(a.secrets));
      } catch (err) {
        this.o.log.warn({ vm: a.vm, err: (err as Error).message }, 'egress secrets not taken back');
      }
    }
    await this.save();
    return bound;
  }

  /** Puts a VM's egress secrets to work in its network (undefined or no bindings: none). */
  private setSecrets(v: Vm, secrets: NetSecrets | undefined): void {
    const had = v.lan.secrets;
    v.a = { ...v.a, secrets: secrets?.bindings.length ? secrets : undefined };
    if (!secrets?.bindings.length) {
      had?.close();
      v.lan.secrets = undefined;
      return;
    }
    if (had && v.ca === secrets.ca) return had.update(secrets.bindings);
    had?.close();
    if (!this.o.values) throw new NetError('this svc-netd was started without a secret store', 'invalid');
    this.trust ??= this.o.trust ?? hostTrust();
    const vm = v.a.vm;
    v.ca = secrets.ca;
    v.lan.secrets = new EgressSecrets({
      vm,
      bindings: secrets.bindings,
      ca: new EgressCa(secrets.ca, vm),
      values: this.o.values,
      trust: this.trust,
      // Through the network's log, where a flood of identical entries is one line a second.
      audit: (e) => v.lan.audit(e),
    });
  }

  private audit(vm: string, e: EgressEntry): void {
    const v = this.vms.get(vm);
    const entry = { t: new Date().toISOString(), vm: v?.a.vm ?? vm, ...e };
    v?.egress.append(entry);
    const line = JSON.stringify({ event: 'egress', entry }) + '\n';
    for (const c of this.clients) if (!c.destroyed) c.write(line);
  }

  /**
   * Ends the server. The state file is not written again: every change wrote it before it was
   * answered, and a server that exits because its control socket is gone (its data directory being
   * removed, a test's among them) must not put a file back into that directory.
   */
  async stop(): Promise<void> {
    clearInterval(this.watch);
    await this.saving;
    for (const v of this.vms.values()) {
      v.lan.close();
      v.lan.secrets?.close();
      await v.egress.flush();
    }
    for (const c of this.clients) c.destroy();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }
}

/** Forwards as this process carries them (their `pid` is svc-netd's). */
const withPid = (forwards: PortForward[]) => forwards.map((f) => ({ ...f, pid: process.pid }));

/** Binds, trying again for a moment while the port is still held (an svc-netd that is exiting). */
async function bindRetrying<T>(bind: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await bind();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE' || i >= 20) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
