import { readFileSync } from 'node:fs';
import { Etcd3, type IKeyValue, type Lease, type Watcher } from 'etcd3';
import {
  addLoad,
  NO_LOAD,
  sameShape,
  shapeOf,
  type NodeInfo,
  type NodeLoad,
  type NodeView,
  type VmEntry,
  type VmShape,
} from '../../domain/cluster.js';
import {
  AlreadyExistsError,
  errorMessage,
  InvalidStateError,
  isDomainError,
  NotFoundError,
  UnavailableError,
} from '../../domain/errors.js';
import type { Instance } from '../../domain/vm.js';
import type { ClusterSettings } from '../../app/cluster-config.js';
import type { ClusterChange, ClusterStore } from '../../ports/cluster.js';
import type { Logger } from '../../ports/logger.js';
import { EtcdCopy, parse } from './etcd-copy.js';

/** How often a node looks whether what it says of itself changed (and says it again when it did). */
const REFRESH_MS = 3000;
/** A write that etcd does not answer within this is Unavailable (no quorum, no member reachable). */
const CALL_DEADLINE_MS = 5000;
/** Transactions that lost a race are tried again this many times, after a random pause of up to RETRY_MS. */
const TXN_TRIES = 40;
const RETRY_MS = 40;

const pause = () => new Promise((r) => setTimeout(r, Math.random() * RETRY_MS));

/**
 * The cluster's state in etcd (docs/cluster.md, "What etcd holds"), under `prefix`:
 * `nodes/<node>` (what a node says of itself, under its lease: gone when the node stops renewing),
 * `members/<node>` (the same, kept: an unreachable node is still listed), `alloc/<node>` (what is
 * placed on the node) and `vms/<name>` (a VM's node, shape, and its Instance as last published).
 * Everything under the prefix is read once and then followed by a watch.
 */
export class EtcdClusterStore implements ClusterStore {
  private readonly client: Etcd3;
  /** Every key under the prefix, as the watch brings it. */
  private readonly copy: EtcdCopy;
  private watcher?: Watcher;
  private lease?: Lease;
  private info?: () => Promise<NodeInfo>;
  private said = '';
  /** The renewal running now (renew). */
  private renewing: Promise<void> = Promise.resolve();
  private timer?: NodeJS.Timeout;
  private left = false;
  private connected = false;
  /** Did the last quorum read of the refresh succeed? A member without quorum keeps the watch open but says nothing. */
  private answering = true;

  constructor(
    private readonly s: ClusterSettings,
    private readonly log: Logger,
  ) {
    this.copy = new EtcdCopy(s.prefix);
    this.client = new Etcd3({
      hosts: s.etcd,
      dialTimeout: CALL_DEADLINE_MS,
      auth: s.auth,
      credentials: s.tls
        ? {
            rootCertificate: readFileSync(s.tls.ca),
            privateKey: s.tls.key ? readFileSync(s.tls.key) : undefined,
            certChain: s.tls.cert ? readFileSync(s.tls.cert) : undefined,
          }
        : undefined,
      defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + CALL_DEADLINE_MS }),
    });
  }

  get stale(): boolean {
    return !this.connected || !this.answering;
  }

  async join(info: () => Promise<NodeInfo>): Promise<void> {
    this.info = info;
    await this.write('join the cluster', async () => {
      const all = await this.client.getAll().prefix(this.s.prefix).exec();
      for (const kv of all.kvs) this.copy.keep(kv, false, true);
      this.watcher = await this.client
        .watch()
        .prefix(this.s.prefix)
        .startRevision(String(Number(all.header.revision) + 1))
        .create();
    });
    const w = this.watcher!;
    this.connected = true;
    w.on('put', (kv) => this.copy.keep(kv));
    w.on('delete', (kv) => this.copy.keep(kv, true));
    w.on('disconnected', () => (this.connected = false));
    w.on('connected', () => (this.connected = true));
    w.on('error', (err) => this.log.warn({ err: errorMessage(err) }, 'cluster: the watch of etcd failed'));
    await this.grant();
    this.timer = setInterval(() => void this.refresh(), REFRESH_MS);
    this.timer.unref();
  }

  nodes(): NodeView[] {
    return this.copy.nodes();
  }

  node(name: string): NodeView | undefined {
    return this.copy.node(name);
  }

  vms(): ReadonlyMap<string, VmEntry> {
    return this.copy.vms();
  }

  vm(name: string): VmEntry | undefined {
    return this.copy.vm(name);
  }

  async look(name: string): Promise<VmEntry | undefined> {
    if (!this.stale) {
      const kv = await this.get(`vms/${name}`).catch(() => undefined);
      if (kv) this.copy.keep(kv);
    }
    return this.vm(name);
  }

  async reserve(names: readonly string[], node: string, shape: VmShape, check: (n: NodeView) => void): Promise<void> {
    await this.place(names, { node, shape }, (load) => {
      const view = this.node(node);
      if (view) check({ ...view, allocated: load });
    });
  }

  async publish(instance: Instance): Promise<void> {
    const self = this.s.node;
    const shape = shapeOf(instance);
    await this.write(`publish vm ${instance.name}`, async () => {
      for (let i = 0; i < TXN_TRIES; i++) {
        const vm = await this.get(`vms/${instance.name}`);
        if (!vm) {
          // A VM made here without a placement (a clone, a fork, a pool claim): it holds its shape now.
          const placed = await this.place([instance.name], { node: self, shape, instance }, () => undefined).then(
            () => true,
            (err) => (err instanceof AlreadyExistsError ? false : Promise.reject(err)),
          );
          if (placed) return;
          continue;
        }
        const e = parse<VmEntry>(vm.value.toString());
        if (!e || e.node !== self) {
          this.log.warn({ vm: instance.name, owner: e?.node }, 'cluster: a vm of this name belongs to another node');
          return;
        }
        const put = this.client.put(this.key(`vms/${instance.name}`)).value(JSON.stringify({ ...e, shape, instance }));
        let r;
        if (sameShape(e.shape, shape)) {
          r = await this.client
            .if(this.key(`vms/${instance.name}`), 'Mod', '==', vm.mod_revision)
            .then(put)
            .commit();
        } else {
          // Its shape was changed (an edit of the stopped VM): the node holds the new one instead.
          const alloc = await this.get(`alloc/${self}`);
          const load = addLoad(parse<NodeLoad>(alloc?.value.toString()) ?? { ...NO_LOAD }, e.shape, -1);
          r = await this.client
            .if(this.key(`vms/${instance.name}`), 'Mod', '==', vm.mod_revision)
            .and(this.key(`alloc/${self}`), 'Mod', '==', alloc?.mod_revision ?? 0)
            .then(put, this.client.put(this.key(`alloc/${self}`)).value(JSON.stringify(addLoad(load, shape, 1))))
            .commit();
        }
        if (r.succeeded) return;
        await pause();
      }
    });
  }

  async release(names: string | readonly string[], owner?: string): Promise<void> {
    const list = typeof names === 'string' ? [names] : [...new Set(names)];
    if (!list.length) return;
    const what = list.length === 1 ? `vm ${list[0]}` : `${list.length} vms (${list[0]}, ...)`;
    await this.write(`release ${what}`, async () => {
      for (let i = 0; i < TXN_TRIES; i++) {
        const found = await Promise.all(list.map(async (name) => ({ name, kv: await this.get(`vms/${name}`) })));
        const gone = found.flatMap(({ name, kv }) => {
          if (!kv) return [];
          const e = parse<VmEntry>(kv.value.toString());
          return owner !== undefined && e?.node !== owner ? [] : [{ name, rev: kv.mod_revision, e }];
        });
        if (!gone.length) return;
        // Each node's room given back once for all of its names, on the revision it was read at.
        const byNode = new Map<string, VmShape[]>();
        for (const g of gone) if (g.e) byNode.set(g.e.node, [...(byNode.get(g.e.node) ?? []), g.e.shape]);
        const allocs = await Promise.all(
          [...byNode.keys()].map(async (node) => [node, await this.get(`alloc/${node}`)] as const),
        );
        let txn = this.client.if(this.key(`vms/${gone[0].name}`), 'Mod', '==', gone[0].rev);
        for (const g of gone.slice(1)) txn = txn.and(this.key(`vms/${g.name}`), 'Mod', '==', g.rev);
        const ops = gone.map((g) => this.client.delete().key(this.key(`vms/${g.name}`))) as never[];
        for (const [node, alloc] of allocs) {
          txn = txn.and(this.key(`alloc/${node}`), 'Mod', '==', alloc?.mod_revision ?? 0);
          const load = byNode
            .get(node)!
            .reduce<NodeLoad>(
              (l, shape) => addLoad(l, shape, -1),
              parse<NodeLoad>(alloc?.value.toString()) ?? { ...NO_LOAD },
            );
          ops.push(this.client.put(this.key(`alloc/${node}`)).value(JSON.stringify(load)) as never);
        }
        if ((await txn.then(...ops).commit()).succeeded) return;
        await pause();
      }
      throw new UnavailableError(`releasing ${what} lost ${TXN_TRIES} races in a row; try again`);
    });
  }

  async reshape(name: string, shape: VmShape, check: (n: NodeView) => void): Promise<void> {
    const self = this.s.node;
    await this.write(`reshape vm ${name}`, async () => {
      for (let i = 0; i < TXN_TRIES; i++) {
        const vm = await this.get(`vms/${name}`);
        const e = parse<VmEntry>(vm?.value.toString());
        if (!vm || !e || sameShape(e.shape, shape)) return;
        if (e.node !== self) throw new InvalidStateError(`vm ${name} is on node ${e.node}, not on node ${self}`);
        const alloc = await this.get(`alloc/${self}`);
        const without = addLoad(parse<NodeLoad>(alloc?.value.toString()) ?? { ...NO_LOAD }, e.shape, -1);
        const view = this.node(self);
        if (view) check({ ...view, allocated: without });
        const r = await this.client
          .if(this.key(`vms/${name}`), 'Mod', '==', vm.mod_revision)
          .and(this.key(`alloc/${self}`), 'Mod', '==', alloc?.mod_revision ?? 0)
          .then(
            this.client.put(this.key(`vms/${name}`)).value(JSON.stringify({ ...e, shape })),
            this.client.put(this.key(`alloc/${self}`)).value(JSON.stringify(addLoad(without, shape, 1))),
          )
          .commit();
        if (r.succeeded) return;
        await pause();
      }
      throw new UnavailableError(`reshaping vm ${name} lost ${TXN_TRIES} races in a row; try again`);
    });
  }

  async transfer(name: string, from: string, to: string, check: (n: NodeView) => void): Promise<void> {
    await this.write(`move vm ${name}`, async () => {
      for (let i = 0; i < TXN_TRIES; i++) {
        const vm = await this.get(`vms/${name}`);
        const e = parse<VmEntry>(vm?.value.toString());
        if (!vm || !e) throw new NotFoundError(`vm ${name} has no entry in the cluster`);
        if (e.node === to) return;
        if (e.node !== from) throw new InvalidStateError(`vm ${name} is on node ${e.node}, not on node ${from}`);
        const [a, b] = await Promise.all([this.get(`alloc/${from}`), this.get(`alloc/${to}`)]);
        const out = parse<NodeLoad>(a?.value.toString()) ?? { ...NO_LOAD };
        const into = parse<NodeLoad>(b?.value.toString()) ?? { ...NO_LOAD };
        const view = this.node(to);
        if (view) check({ ...view, allocated: into });
        const r = await this.client
          .if(this.key(`vms/${name}`), 'Mod', '==', vm.mod_revision)
          .and(this.key(`alloc/${from}`), 'Mod', '==', a?.mod_revision ?? 0)
          .and(this.key(`alloc/${to}`), 'Mod', '==', b?.mod_revision ?? 0)
          .then(
            this.client.put(this.key(`vms/${name}`)).value(JSON.stringify({ ...e, node: to })),
            this.client.put(this.key(`alloc/${from}`)).value(JSON.stringify(addLoad(out, e.shape, -1))),
            this.client.put(this.key(`alloc/${to}`)).value(JSON.stringify(addLoad(into, e.shape, 1))),
          )
          .commit();
        if (r.succeeded) return;
        await pause();
      }
      throw new UnavailableError(`moving vm ${name} lost ${TXN_TRIES} races in a row; try again`);
    });
  }

  watch(listener: (c: ClusterChange) => void): () => void {
    return this.copy.watch(listener);
  }

  async leave(): Promise<void> {
    this.left = true;
    clearInterval(this.timer);
    await this.lease?.revoke().catch(() => undefined);
    await this.watcher?.cancel().catch(() => undefined);
    this.client.close();
  }

  /**
   * Writes `entry` under each of `names` while all are free, and their room into its node's load
   * after `check` saw it, in one transaction.
   */
  private async place(names: readonly string[], entry: VmEntry, check: (load: NodeLoad) => void): Promise<void> {
    const what = names.length === 1 ? `vm ${names[0]}` : `${names.length} vms (${names[0]}, ...)`;
    await this.write(`place ${what}`, async () => {
      for (let i = 0; i < TXN_TRIES; i++) {
        const [alloc, ...vms] = await Promise.all([
          this.get(`alloc/${entry.node}`),
          ...names.map((name) => this.get(`vms/${name}`)),
        ]);
        const taken = vms.findIndex((vm) => vm);
        if (taken >= 0) {
          const owner = parse<VmEntry>(vms[taken]!.value.toString())?.node;
          throw new AlreadyExistsError(`vm ${names[taken]} already exists${owner ? ` (on node ${owner})` : ''}`);
        }
        const load = parse<NodeLoad>(alloc?.value.toString()) ?? { ...NO_LOAD };
        check(load);
        let txn = this.client.if(this.key(`alloc/${entry.node}`), 'Mod', '==', alloc?.mod_revision ?? 0);
        for (const name of names) txn = txn.and(this.key(`vms/${name}`), 'Create', '==', 0);
        const r = await txn
          .then(
            ...names.map((name) => this.client.put(this.key(`vms/${name}`)).value(JSON.stringify(entry))),
            this.client
              .put(this.key(`alloc/${entry.node}`))
              .value(JSON.stringify(addLoad(load, entry.shape, names.length))),
          )
          .commit();
        if (r.succeeded) return;
        await pause();
      }
      throw new UnavailableError(`placing ${what} lost ${TXN_TRIES} races in a row; try again`);
    });
  }

  /** Takes a lease and says what this node is under it; when the lease is lost, takes a new one. */
  private async grant(): Promise<void> {
    const lease = this.client.lease(Math.max(2, Math.round(this.s.lease_ttl_ms / 1000)));
    lease.on('lost', (err) => {
      if (this.lease !== lease || this.left) return;
      this.lease = undefined;
      this.log.warn({ err: errorMessage(err) }, 'cluster: lost the lease; joining again');
    });
    this.lease = lease;
    this.said = '';
    await this.say(false);
  }

  async announce(): Promise<void> {
    await this.renew(true);
  }

  /** The renewal every few seconds; what it cannot write is written at the next. */
  private refresh(): Promise<void> {
    return this.renew(false);
  }

  /** One renewal at a time, in order: an older one never writes over what a newer one said. */
  private renew(strict: boolean): Promise<void> {
    const run = this.renewing.then(() => this.say(strict));
    this.renewing = run.catch(() => undefined);
    return run;
  }

  /**
   * Says again what this node is when that changed (its VMs, its images, its load, a drain).
   * `strict`: a write that fails throws (UnavailableError) instead of waiting for the next renewal.
   */
  private async say(strict: boolean): Promise<void> {
    if (this.left || !this.info) return;
    // A read answered before the delete came arrives within its deadline.
    this.copy.sweep(10 * CALL_DEADLINE_MS);
    try {
      // A linearizable read: it fails when the members reached have no quorum.
      await this.client.get(this.key(`members/${this.s.node}`)).exec();
      this.answering = true;
    } catch {
      this.answering = false;
    }
    try {
      if (!this.lease) return await this.grant();
      const info = await this.info();
      const text = JSON.stringify({ ...info, seen_at: '' });
      if (text === this.said) return;
      const json = JSON.stringify({ ...info, seen_at: new Date().toISOString() });
      await this.lease.put(this.key(`nodes/${info.node}`)).value(json);
      await this.client.put(this.key(`members/${info.node}`)).value(json);
      this.said = text;
    } catch (err) {
      if (strict) throw new UnavailableError(`etcd did not take what this node says of itself: ${errorMessage(err)}`);
      this.log.warn({ err: errorMessage(err) }, 'cluster: cannot renew what this node says of itself');
    }
  }

  private key(rest: string): string {
    return this.s.prefix + rest;
  }

  private async get(rest: string): Promise<IKeyValue | undefined> {
    return (await this.client.get(this.key(rest)).exec()).kvs[0];
  }

  /** Runs a write; what etcd answers with an error of its own (unreachable, no quorum) is Unavailable. */
  private async write<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (isDomainError(err)) throw err;
      throw new UnavailableError(`cannot ${what}: the cluster's etcd does not answer (${errorMessage(err)})`);
    }
  }
}
