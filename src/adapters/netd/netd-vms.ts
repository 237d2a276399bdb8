import { readFile } from 'node:fs/promises';
import { parseEgressPolicy, type EgressPolicy } from '../../domain/egress.js';
import { parseEgressSecretBindings } from '../../domain/egress-secrets.js';
import type { PortForward } from '../../domain/vm.js';
import type { Logger } from '../../ports/logger.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import { NdjsonLog } from '../fs-kit/ndjson-log.js';
import { DnsUpstream, HostAddresses } from './dns-upstream.js';
import { EgressCa, ensureEgressCa } from './egress-ca.js';
import type { EgressEntry } from './egress-guard.js';
import { GuestLan } from './guest-lan.js';
import type { NetAttachment, NetListed, NetSecrets } from './protocol.js';
import { EgressSecrets, hostTrust, type SecretValues } from './secret-proxy.js';

/** Each VM's egress log is kept under this, plus one older copy. */
const EGRESS_LOG_MAX = 2 << 20;

/** A refusal svc-netd answers with a code of the protocol's (`not_found`, `exists`, `invalid`). */
export class NetError extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
  }
}

export interface NetdVmsOptions {
  /** Where the attachments are kept, so a restarted svc-netd takes its VMs' networks back. */
  state: string;
  log: Logger;
  /** Resolvers for the guests' allowed queries (HOST[:PORT]); default: the host's /etc/resolv.conf. */
  dns?: string[];
  /** Where egress secrets' values are read, at each request (none: egress secrets are refused). */
  values?: SecretValues;
  /** The certificates an upstream of an egress secret must lead to (default: the host's trust store). */
  trust?: string[];
  /** Hands an egress log entry to the control socket's clients (the daemon's event stream). */
  broadcast: (line: string) => void;
}

interface Vm {
  a: NetAttachment;
  lan: GuestLan;
  egress: NdjsonLog;
  /** Where the CA of its egress secrets is. */
  ca?: string;
}

/**
 * The networks svc-netd keeps, one GuestLan a VM, and the state file that lists them: every change
 * is written there before it is answered, and a restarted svc-netd takes them back from it.
 */
export class NetdVms {
  private readonly vms = new Map<string, Vm>();
  private readonly upstream: DnsUpstream;
  private readonly hostAddresses = new HostAddresses();
  private saving: Promise<void> = Promise.resolve();
  /** Detaches whose egress log and state file are still being written, by VM. */
  private readonly detaching = new Map<string, Promise<void>>();
  private trust: string[] | undefined;

  constructor(private readonly o: NetdVmsOptions) {
    this.upstream = new DnsUpstream(o.dns ?? []);
  }

  get size(): number {
    return this.vms.size;
  }

  /** The attachments of the state file, taken back (a VM whose link is gone is dropped). */
  async restore(): Promise<void> {
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

  /** Writes the state file (one write at a time, in order). */
  save(): Promise<void> {
    const vms = [...this.vms.values()].map((v) => v.a);
    this.saving = this.saving
      .then(() => writeFileAtomic(this.o.state, JSON.stringify({ vms }, null, 1)))
      .catch((err: Error) => this.o.log.error({ err: err.message }, 'cannot write the state file'));
    return this.saving;
  }

  /**
   * Attaches (or updates) a VM's network: its link connected, its forwards bound (the ones it had
   * and no longer has are closed), its policy set. Resolves with the forwards as bound.
   */
  async attach(a: NetAttachment, linkTimeoutMs = 10_000): Promise<PortForward[]> {
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

  /** Ends a VM's network; resolves once its log and the state file say so. */
  async detach(name: string): Promise<void> {
    const v = this.vms.get(name);
    if (!v) {
      // Detached already (a second call for one VM, as when a QEMU's end and its destroy both
      // say so): answered once the first one's log and state file are written, so an answer
      // always means the state file says so (a CI run saw netd.json written after the daemon
      // had stopped, while its data dir was being removed).
      return this.detaching.get(name);
    }
    this.vms.delete(name);
    v.lan.close();
    v.lan.secrets?.close();
    const done = v.egress.flush().then(() => this.save());
    this.detaching.set(name, done);
    await done.finally(() => this.detaching.delete(name));
  }

  /** Sets a VM's egress secrets; answers the PEM of the CA its guest must trust (none without bindings). */
  async secrets(name: string, given: NetSecrets | undefined): Promise<string | undefined> {
    const v = this.vm(name);
    const secrets = parseNetSecrets(given);
    const caPem = secrets.bindings.length ? await ensureEgressCa(secrets.ca, name) : undefined;
    this.setSecrets(v, secrets);
    await this.save();
    return caPem;
  }

  /** A VM's network under its new name; its secrets were the old VM's and are dropped. */
  async rename(from: string, to: string, paths: { log: string; socket: string }): Promise<void> {
    const v = this.vm(from);
    if (this.vms.has(to)) throw new NetError(`vm ${to} has a network already`, 'exists');
    this.vms.delete(from);
    // Its secrets were the old VM's (a pool member's, a spare's): the new one sets its own.
    this.setSecrets(v, undefined);
    v.a = { ...v.a, vm: to, log: paths.log, socket: paths.socket, secrets: undefined };
    await v.egress.moveTo(paths.log);
    this.vms.set(to, v);
    await this.save();
  }

  async setPolicy(name: string, given: EgressPolicy): Promise<void> {
    const v = this.vm(name);
    const policy = parseEgressPolicy(given);
    v.lan.setPolicy(policy);
    v.a = { ...v.a, policy };
    await this.save();
  }

  async forward(name: string, forwards: PortForward[]): Promise<PortForward[]> {
    const v = this.vm(name);
    const added = await v.lan.forwards.add(forwards);
    v.a = { ...v.a, forwards: v.lan.forwards.list() };
    await this.save();
    return added;
  }

  async unforward(name: string, hostPort: number, proto: PortForward['proto']): Promise<boolean> {
    const v = this.vm(name);
    const removed = v.lan.forwards.remove(hostPort, proto);
    v.a = { ...v.a, forwards: v.lan.forwards.list() };
    await this.save();
    return removed;
  }

  list(): NetListed[] {
    return [...this.vms.values()].map((v) => ({ ...v.a, ...v.lan.stats() }) satisfies NetListed);
  }

  /** Ends every network (the state file is not written again: see NetdServer.stop). */
  async close(): Promise<void> {
    await this.saving;
    for (const v of this.vms.values()) {
      v.lan.close();
      v.lan.secrets?.close();
      await v.egress.flush();
    }
  }

  private vm(name: string): Vm {
    const v = this.vms.get(name);
    if (!v) throw new NetError(`no network for vm ${name}`, 'not_found');
    return v;
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
    this.o.broadcast(JSON.stringify({ event: 'egress', entry }) + '\n');
  }
}

function parseNetSecrets(s: NetSecrets | undefined): NetSecrets {
  if (!s || typeof s.ca !== 'string' || !s.ca.startsWith('/'))
    throw new NetError('secrets need {ca, bindings}', 'invalid');
  return { ca: s.ca, bindings: parseEgressSecretBindings(s.bindings) };
}

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
