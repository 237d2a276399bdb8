import { randomBytes } from 'node:crypto';
import { inject, injectable, optional } from 'inversify';
import { bindEgressSecrets } from '../domain/egress-secrets.js';
import { lifetimeOf } from '../domain/lifetime.js';
import type { CreateRequest } from '../domain/create-request.js';
import type { VmChange } from '../domain/events.js';
import {
  AlreadyExistsError,
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
  ResourceExhaustedError,
} from '../domain/errors.js';
import type { VmRecord } from '../domain/vm.js';
import { holdsResources } from '../domain/vm.js';
import { assertVmName, nextDefaultName } from '../domain/names.js';
import type { Instance } from '../domain/vm.js';
import { toPublic } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import type { ImageInfo } from '../ports/guest-images.js';
import { VmStore } from '../ports/stores.js';
import type { Config } from './config.js';
import { KeyedMutex } from './keyed-mutex.js';
import type { ClusterSettings } from './cluster-config.js';
import { AppConfig, ClusterConfig } from './tokens.js';

/**
 * The unit of work for VMs that every use case goes through: the records, in memory (the store
 * persists each change), read with `get`, changed under the VM's lock with `withVm`, persisted
 * with `save`. Reservation is synchronous: the checks against the caps and the insert happen in
 * one step, so concurrent creates cannot overshoot a cap or take the same name or pool member.
 */
@injectable()
export class Vms {
  private readonly records = new Map<string, VmRecord>();
  /** Operations on one VM run one at a time; different VMs run concurrently. */
  private readonly locks = new KeyedMutex();
  /** The signals of the work holding each VM's lock (see `interrupt`). */
  private readonly holders = new Map<string, Set<AbortController>>();
  private readonly watchers = new Set<(change: VmChange) => void>();

  constructor(
    @inject(AppConfig) private readonly config: Config,
    @inject(Clock) private readonly clock: Clock,
    @inject(VmStore) private readonly store: VmStore,
    @inject(ClusterConfig) @optional() private readonly cluster?: ClusterSettings,
  ) {}

  /**
   * A record this node holds from now on names the node on a node of a cluster, so every answer
   * about it does (a create's, a verb's, the feed's); without a cluster, none does.
   */
  private held(rec: VmRecord): VmRecord {
    if (this.cluster) rec.node = this.cluster.node;
    else delete rec.node;
    return rec;
  }

  /** The VM's record. InvalidArgumentError for a bad name, NotFoundError for an unknown one. */
  get(name: string): VmRecord {
    assertVmName(name);
    const rec = this.records.get(name);
    if (!rec) throw new NotFoundError(`vm ${name} not found`);
    return rec;
  }

  /** The VM's record, or undefined (no name check). */
  find(name: string): VmRecord | undefined {
    return this.records.get(name);
  }

  /**
   * Runs `fn` on the VM's record while holding its lock, so it cannot interleave with another change.
   * `signal` is aborted by `interrupt(name)`: work that waits on the guest (an agent deploy over SSH)
   * honours it, so a guest that stalls cannot keep a DELETE waiting.
   */
  withVm<T>(name: string, fn: (rec: VmRecord, signal: AbortSignal) => Promise<T>): Promise<T> {
    assertVmName(name);
    return this.locks.run(name, async () => {
      const ac = new AbortController();
      let held = this.holders.get(name);
      if (!held) this.holders.set(name, (held = new Set()));
      held.add(ac);
      try {
        return await fn(this.get(name), ac.signal);
      } finally {
        held.delete(ac);
        if (!held.size && this.holders.get(name) === held) this.holders.delete(name);
      }
    });
  }

  /** Aborts the signal of the work that holds the VM's lock now (DELETE calls it before it queues). */
  interrupt(name: string): void {
    for (const ac of this.holders.get(name) ?? []) ac.abort();
  }

  /** Runs `fn` under the VM's lock whether or not the record exists yet (creates, deletes). */
  locked<T>(name: string, fn: () => Promise<T>): Promise<T> {
    return this.locks.run(name, fn);
  }

  /** Persists the record (temp + fsync + rename in the store). A record purged meanwhile is not written back. */
  async save(rec: VmRecord): Promise<void> {
    rec.updated_at = new Date(this.clock.now()).toISOString();
    if (this.records.get(rec.name) !== rec) return;
    await this.store.put(rec);
    this.changed(rec);
  }

  /**
   * Follows every change the API can see (a record reserved, saved, renamed from the pool, or
   * forgotten); warm pool members stay hidden until claimed. Returns the unsubscribe.
   * Watchers run synchronously and must not throw or block: they queue and return.
   */
  watch(watcher: (change: VmChange) => void): () => void {
    this.watchers.add(watcher);
    return () => this.watchers.delete(watcher);
  }

  private notify(change: VmChange): void {
    for (const w of this.watchers) w(change);
  }

  private changed(rec: VmRecord): void {
    if (!rec.pool) this.notify({ event: 'vm', vm: toPublic(rec) });
  }

  /** Loads every persisted record (daemon start). */
  async load(): Promise<VmRecord[]> {
    for (const rec of await this.store.list()) {
      // A record from before egress policies gets the config's default.
      rec.egress ??= this.config.egress;
      this.records.set(rec.name, this.held(rec));
    }
    return [...this.records.values()];
  }

  /**
   * Takes in a VM whose record and files arrived whole (moved here from another node).
   * AlreadyExistsError when the name is taken here; ResourceExhaustedError past max_vms.
   */
  admit(rec: VmRecord): void {
    if (this.records.has(rec.name)) throw new AlreadyExistsError(`vm ${rec.name} already exists here`);
    this.checkRoom(1, 0, 0);
    this.records.set(rec.name, this.held(rec));
    this.changed(rec);
  }

  /** Forgets a record (its files are the caller's to remove). */
  forget(name: string): void {
    const rec = this.records.get(name);
    this.records.delete(name);
    if (rec && !rec.pool) this.notify({ event: 'removed', name });
  }

  /** Every VM but unclaimed warm pool members, by name, as the API shows them. */
  list(): Instance[] {
    return [...this.records.values()]
      .filter((r) => !r.pool)
      .sort((a, b) => a.name.localeCompare(b.name))
      .map(toPublic);
  }

  /** Every record, pool members included. */
  all(): VmRecord[] {
    return [...this.records.values()];
  }

  /** Warm pool members of a template. */
  poolMembers(template: string): VmRecord[] {
    return [...this.records.values()].filter((r) => r.pool === template);
  }

  /**
   * A ready warm pool member of `template` (suspended, or running for a running pool), moved to
   * `name` in the map at once; or undefined.
   */
  takePoolMember(
    template: string,
    name: string,
    running: boolean,
  ): { member: VmRecord; oldName: string; wasRunning: boolean } | undefined {
    const ready = running ? 'running' : 'suspended';
    const member = [...this.records.values()].find((r) => r.pool === template && r.status === ready);
    if (!member) return undefined;
    if (this.records.has(name)) throw new AlreadyExistsError(`vm ${name} already exists`);
    if (!running) this.checkCaps(member.cpus, member.memory_mb);
    const oldName = member.name;
    this.records.delete(oldName);
    member.name = name;
    delete member.pool;
    this.records.set(name, member);
    this.changed(member);
    return { member, oldName, wasRunning: running };
  }

  nextName(): string {
    return nextDefaultName(this.records.keys());
  }

  /** A template is a persistent VM that is stopped or suspended. */
  templateOf(name: string): VmRecord {
    const t = this.records.get(name);
    if (!t) throw new InvalidArgumentError(`template vm ${name} not found`);
    if (!t.persistent || (t.status !== 'stopped' && t.status !== 'suspended')) {
      throw new InvalidStateError(
        `vm ${name} is ${t.persistent ? t.status : 'ephemeral'}; a template must be a persistent vm that is stopped or suspended`,
      );
    }
    return t;
  }

  /** Reserves the VM's name and resources; `pool` marks a warm pool member (hidden from the list and the feed). */
  reserve(req: CreateRequest, image: ImageInfo, pool?: string): VmRecord {
    const name = req.name ?? this.nextName();
    if (this.records.has(name)) throw new AlreadyExistsError(`vm ${name} already exists`);
    const cpus = req.cpus ?? this.config.cpus;
    const memory = req.memory_mb ?? this.config.memory_mb;
    this.checkRoom(1, cpus, memory);
    const now = new Date(this.clock.now()).toISOString();
    const rec: VmRecord = {
      name,
      status: 'creating',
      persistent: req.persistent,
      cpus,
      memory_mb: memory,
      disk_gb: req.disk_gb ?? this.config.disk_gb,
      image: image.id,
      ip: '',
      ssh_port: 0,
      agent_port: 0,
      agent_cid: 0,
      forwards: [],
      tags: req.tags,
      mounts: req.mounts,
      metrics_enabled: req.metrics_enabled ?? this.config.sandbox_metrics_enabled,
      created_at: now,
      updated_at: now,
      userdata: req.userdata,
      egress: req.egress ?? this.config.egress,
      ...lifetimeOf(req, this.clock.now()),
    };
    // A new VM's placeholders are its own, also when the bindings are its template's.
    if (req.egress_secrets?.length) rec.egress_secrets = bindEgressSecrets(req.egress_secrets, randomBytes);
    if (this.config.network === 'overlay') rec.overlay_ip = this.freeOverlayIp();
    if (!image.agent_ready) rec.agent_missing = true;
    if (req.entrypoint !== undefined && req.entrypoint !== true) rec.entrypoint = req.entrypoint;
    if (pool) rec.pool = pool;
    this.records.set(name, this.held(rec));
    this.changed(rec);
    return rec;
  }

  /** The lowest free address on the overlay segment, 10.77.0.2 to .254. */
  freeOverlayIp(): string {
    const used = new Set([...this.records.values()].map((r) => r.overlay_ip));
    for (let n = 2; n < 255; n++) if (!used.has(`10.77.0.${n}/24`)) return `10.77.0.${n}/24`;
    throw new ResourceExhaustedError('the overlay segment 10.77.0.0/24 has no free address');
  }

  /** Throws ResourceExhausted when running `cpus` and `memory` more would pass a cap. */
  /** Is there room for `n` more VMs of this shape (max_vms and the totals)? ResourceExhaustedError if not. */
  checkRoom(n: number, cpus: number, memory: number): void {
    const { max_vms } = this.config;
    if (max_vms && this.records.size + n > max_vms) throw new ResourceExhaustedError(`max_vms (${max_vms}) reached`);
    this.checkCaps(cpus * n, memory * n);
  }

  checkCaps(cpus: number, memory: number): void {
    const { max_cpus_total, max_memory_mb_total } = this.config;
    const holding = [...this.records.values()].filter((r) => holdsResources(r.status));
    const usedCpus = holding.reduce((s, r) => s + r.cpus, 0);
    const usedMem = holding.reduce((s, r) => s + r.memory_mb, 0);
    if (max_cpus_total && usedCpus + cpus > max_cpus_total) {
      throw new ResourceExhaustedError(
        `max_cpus_total (${max_cpus_total}) would be exceeded: ${usedCpus} in use, ${cpus} asked`,
      );
    }
    if (max_memory_mb_total && usedMem + memory > max_memory_mb_total) {
      throw new ResourceExhaustedError(
        `max_memory_mb_total (${max_memory_mb_total}) would be exceeded: ${usedMem} MB in use, ${memory} MB asked`,
      );
    }
  }

  count(pred: (r: VmRecord) => boolean): number {
    let n = 0;
    for (const r of this.records.values()) if (pred(r)) n++;
    return n;
  }
}
