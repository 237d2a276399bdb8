import { randomUUID } from 'node:crypto';
import { inject, injectable } from 'inversify';
import type { CreateRequest, WaitMode } from '../domain/create-request.js';
import { parseCreateRequest, parseCreateTimeout, parseWaitMode } from '../domain/create-request.js';
import {
  AlreadyExistsError, DeadlineExceededError, InternalError, InvalidArgumentError, InvalidStateError, NotFoundError,
  ResourceExhaustedError, errorMessage, isDomainError,
} from '../domain/errors.js';
import type { CreatePhase, CreateProgressEvent } from '../domain/events.js';
import type { Instance, InstanceRecord, LifecycleVerb } from '../domain/instance.js';
import { assertTransition, hasProcess, holdsResources, toPublic } from '../domain/instance.js';
import { assertVmName, nextDefaultName } from '../domain/names.js';
import { Clock } from '../ports/clock.js';
import { GuestAgent } from '../ports/guest-agent.js';
import type { ImageInfo, VmHandle, VmRef, VmSpec } from '../ports/hypervisor.js';
import { Hypervisor } from '../ports/hypervisor.js';
import { Logger } from '../ports/logger.js';
import { ControlMetrics } from '../ports/metrics.js';
import { ActivityLog, InstanceStore } from '../ports/stores.js';
import { SshKeys, SshProbe } from '../ports/tunnels.js';
import { AsyncQueue } from './async-queue.js';
import type { Config } from './config.js';
import { KeyedMutex } from './keyed-mutex.js';
import { LifecycleEvents } from './lifecycle-events.js';
import { agentEndpoint, waitReady } from './readiness.js';
import { AppConfig } from './tokens.js';

export interface CreateJob {
  name: string;
  /** Progress events; the last is `ready` or `error`. Reading is optional: the create runs anyway. */
  events: AsyncIterable<CreateProgressEvent>;
  /** Resolves with the ready instance or rejects with the domain error that failed the create. */
  done: Promise<Instance>;
}

export interface MessageResult {
  message: string;
  name: string;
}

/**
 * The VM lifecycle use cases. Holds every record in memory (the store persists them), so reads
 * are cheap; serializes operations per VM; checks caps synchronously with the reservation they
 * guard, so concurrent creates cannot overshoot a cap.
 */
@injectable()
export class InstanceService {
  private readonly records = new Map<string, InstanceRecord>();
  private readonly locks = new KeyedMutex();
  /** VMs whose process died on its own, with the reason; consulted by readiness waits. */
  private readonly deaths = new Map<string, string>();
  /** VMs the service itself is stopping, so their exits are not reported as crashes. */
  private readonly stopping = new Set<string>();

  constructor(
    @inject(AppConfig) private readonly config: Config,
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(GuestAgent) private readonly agent: GuestAgent,
    @inject(SshProbe) private readonly ssh: SshProbe,
    @inject(SshKeys) private readonly keys: SshKeys,
    @inject(InstanceStore) private readonly store: InstanceStore,
    @inject(ActivityLog) private readonly activity: ActivityLog,
    @inject(ControlMetrics) private readonly metrics: ControlMetrics,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
    @inject(LifecycleEvents) private readonly events: LifecycleEvents,
  ) {
    metrics.setRunningSource(() => this.count((r) => r.status === 'running'));
    hv.onExit((name, reason) => void this.onProcessExit(name, reason));
  }

  /**
   * Loads the records and re-attaches to VMs that were running when the daemon stopped. A create
   * that a crash interrupted is rolled back; an ephemeral VM whose process is gone is removed; a
   * persistent one becomes `error`.
   */
  async init(): Promise<void> {
    for (const rec of await this.store.list()) this.records.set(rec.name, rec);
    for (const rec of [...this.records.values()]) {
      if (rec.status === 'creating') {
        this.log.warn({ vm: rec.name }, 'rolling back a create interrupted by a daemon stop');
        await this.purge(rec);
        continue;
      }
      if (!hasProcess(rec.status)) continue;
      const handle = rec.runtime ? await this.hv.reattach(this.ref(rec), rec.runtime as unknown as VmHandle).catch(() => null) : null;
      if (handle) {
        this.applyHandle(rec, handle);
        await this.save(rec);
        this.log.info({ vm: rec.name, pid: handle.pid }, 're-attached to running vm');
        if (rec.status === 'running') await this.events.emit('up', rec);
      } else if (!rec.persistent) {
        this.log.warn({ vm: rec.name }, 'ephemeral vm process is gone; removing it');
        await this.purge(rec);
      } else {
        rec.status = 'error';
        rec.error = 'the vm process was gone when the daemon started';
        this.clearRuntime(rec);
        await this.save(rec);
      }
    }
  }

  /** Every VM but unclaimed warm pool members, by name. */
  list(): Instance[] {
    return [...this.records.values()].filter((r) => !r.pool).sort((a, b) => a.name.localeCompare(b.name)).map(toPublic);
  }

  /** Warm pool members of a template (GET /pool). */
  poolMembers(template: string): InstanceRecord[] {
    return [...this.records.values()].filter((r) => r.pool === template);
  }

  get(name: string): Instance {
    return toPublic(this.mustGet(name));
  }

  /** The full record, for services that act on a VM (agent proxy, forwards). */
  record(name: string): InstanceRecord {
    return this.mustGet(name);
  }

  /** Runs `fn` while holding the VM's lock, so it cannot interleave with a lifecycle change. */
  withLock<T>(name: string, fn: (rec: InstanceRecord) => Promise<T>): Promise<T> {
    return this.locks.run(name, async () => fn(this.mustGet(name)));
  }

  async saveRecord(rec: InstanceRecord): Promise<void> {
    await this.save(rec);
  }

  /**
   * Validates a create, reserves the name and resources, and starts the create in the background.
   * Throws (before anything exists) InvalidArgumentError, AlreadyExistsError or ResourceExhaustedError.
   */
  async create(body: unknown, query: { wait?: unknown; timeout?: unknown }, internal: { pool?: string } = {}): Promise<CreateJob> {
    const req = parseCreateRequest(body);
    const wait = parseWaitMode(query.wait);
    const timeoutMs = parseCreateTimeout(query.timeout) ?? this.config.ready_timeout_ms + this.config.create_buffer_ms;
    if (req.from_pool) {
      const pool = this.config.warm_pool.template;
      if (!pool) throw new InvalidArgumentError('from_pool: no warm_pool is configured');
      const claimed = await this.claim(req, wait, timeoutMs);
      if (claimed) return claimed;
      req.from = pool; // the pool is empty: clone the template directly
    }
    const template = req.from === undefined ? undefined : this.templateOf(req.from);
    await this.hv.checkMounts(req.mounts);
    const image = await this.hv.resolveImage(template?.image ?? req.image ?? this.config.image);
    const pubKey = await this.keys.publicKey();
    // From here to the map insert there is no await: the checks and the reservation are atomic.
    const rec = this.reserve(template ? { ...req, cpus: template.cpus, memory_mb: template.memory_mb, disk_gb: template.disk_gb } : req, image);
    if (template) rec.from = template.name;
    if (internal.pool) rec.pool = internal.pool;
    const queue = new AsyncQueue<CreateProgressEvent>();
    const done = this.locks.run(rec.name, () => this.runCreate(rec, req, image, wait, timeoutMs, pubKey, queue, template));
    done.catch(() => undefined);
    return { name: rec.name, events: queue, done };
  }

  /**
   * Hands out a suspended warm pool member: picked, renamed and marked in one synchronous step (so
   * concurrent creates never get the same one), then restored with the request's tags and forwards
   * and given its identity. Resolves undefined when no member is ready.
   */
  private async claim(req: CreateRequest, wait: WaitMode, timeoutMs: number): Promise<CreateJob | undefined> {
    const pool = this.config.warm_pool.template;
    const image = await this.hv.resolveImage(this.records.get(pool)?.image ?? this.config.image);
    const pubKey = await this.keys.publicKey();
    const member = [...this.records.values()].find((r) => r.pool === pool && r.status === 'suspended');
    if (!member) return undefined;
    const name = req.name ?? nextDefaultName(this.records.keys());
    if (this.records.has(name)) throw new AlreadyExistsError(`vm ${name} already exists`);
    this.checkCaps(member.cpus, member.memory_mb);
    const oldName = member.name;
    this.records.delete(oldName);
    Object.assign(member, {
      name, status: 'creating', persistent: req.persistent, tags: req.tags, from: pool,
      metrics_enabled: req.metrics_enabled ?? this.config.sandbox_metrics_enabled,
      forwards: [], created_at: new Date(this.clock.now()).toISOString(),
    });
    delete member.pool;
    delete member.suspended_at;
    this.records.set(name, member);
    const queue = new AsyncQueue<CreateProgressEvent>();
    const done = this.locks.run(name, () => this.runClaim(member, oldName, req, image, wait, timeoutMs, pubKey, queue));
    done.catch(() => undefined);
    return { name, events: queue, done };
  }

  private async runClaim(
    rec: InstanceRecord, oldName: string, req: CreateRequest, image: ImageInfo, wait: WaitMode, timeoutMs: number, pubKey: string,
    queue: AsyncQueue<CreateProgressEvent>,
  ): Promise<Instance> {
    const t0 = this.clock.now();
    const deadline = t0 + timeoutMs;
    const emit = this.emitter(rec, queue, t0);
    emit('accepted', `claiming warm pool member ${oldName} of template ${rec.from}`);
    void this.events.emit('claimed', rec);
    try {
      await this.store.rename(oldName, rec.name);
      await this.hv.rename({ name: oldName, dir: this.store.dir(oldName) }, this.ref(rec));
      await this.save(rec);
      emit('boot', `restoring ${oldName} as ${rec.name}`);
      const handle = await this.beforeDeadline(deadline, this.hv.launch(this.spec(rec, req.forwards, pubKey), { restore: true }));
      this.applyHandle(rec, handle);
      await this.save(rec);
      await this.awaitReady(rec, wait === 'auto' ? (image.agent_ready ? 'agent' : 'ssh') : wait, deadline, emit);
      if (image.agent_ready) await this.beforeDeadline(deadline, this.setIdentity(rec, true));
      return await this.created(rec, t0, emit, { member: oldName }, `claimed ${oldName}`);
    } catch (err) {
      return await this.createFailed(rec, err, t0, emit);
    } finally {
      queue.close();
    }
  }

  /** A template is a persistent VM that is stopped or suspended. */
  private templateOf(name: string): InstanceRecord {
    const t = this.records.get(name);
    if (!t) throw new InvalidArgumentError(`template vm ${name} not found`);
    if (!t.persistent || (t.status !== 'stopped' && t.status !== 'suspended')) {
      throw new InvalidStateError(`vm ${name} is ${t.persistent ? t.status : 'ephemeral'}; a template must be a persistent vm that is stopped or suspended`);
    }
    return t;
  }

  private reserve(req: CreateRequest, image: ImageInfo): InstanceRecord {
    const name = req.name ?? nextDefaultName(this.records.keys());
    if (this.records.has(name)) throw new AlreadyExistsError(`vm ${name} already exists`);
    const cpus = req.cpus ?? this.config.cpus;
    const memory = req.memory_mb ?? this.config.memory_mb;
    const { max_vms } = this.config;
    if (max_vms && this.records.size + 1 > max_vms) throw new ResourceExhaustedError(`max_vms (${max_vms}) reached`);
    this.checkCaps(cpus, memory);
    const now = new Date(this.clock.now()).toISOString();
    const rec: InstanceRecord = {
      name, status: 'creating', persistent: req.persistent, cpus, memory_mb: memory,
      disk_gb: req.disk_gb ?? this.config.disk_gb, image: image.id, ip: '', ssh_port: 0, agent_port: 0, agent_cid: 0,
      forwards: [], tags: req.tags, mounts: req.mounts,
      metrics_enabled: req.metrics_enabled ?? this.config.sandbox_metrics_enabled,
      created_at: now, updated_at: now, userdata: req.userdata,
    };
    if (this.config.network === 'overlay') rec.overlay_ip = this.freeOverlayIp();
    this.records.set(name, rec);
    return rec;
  }

  /** The lowest free address on the overlay segment, 10.77.0.2 to .254. */
  private freeOverlayIp(): string {
    const used = new Set([...this.records.values()].map((r) => r.overlay_ip));
    for (let n = 2; n < 255; n++) if (!used.has(`10.77.0.${n}/24`)) return `10.77.0.${n}/24`;
    throw new ResourceExhaustedError('the overlay segment 10.77.0.0/24 has no free address');
  }

  /** Throws ResourceExhausted when running `cpus` and `memory` more would pass a cap. */
  private checkCaps(cpus: number, memory: number): void {
    const { max_cpus_total, max_memory_mb_total } = this.config;
    const holding = [...this.records.values()].filter((r) => holdsResources(r.status));
    const usedCpus = holding.reduce((s, r) => s + r.cpus, 0);
    const usedMem = holding.reduce((s, r) => s + r.memory_mb, 0);
    if (max_cpus_total && usedCpus + cpus > max_cpus_total) {
      throw new ResourceExhaustedError(`max_cpus_total (${max_cpus_total}) would be exceeded: ${usedCpus} in use, ${cpus} asked`);
    }
    if (max_memory_mb_total && usedMem + memory > max_memory_mb_total) {
      throw new ResourceExhaustedError(`max_memory_mb_total (${max_memory_mb_total}) would be exceeded: ${usedMem} MB in use, ${memory} MB asked`);
    }
  }

  private async runCreate(
    rec: InstanceRecord, req: CreateRequest, image: ImageInfo, wait: WaitMode, timeoutMs: number, pubKey: string,
    queue: AsyncQueue<CreateProgressEvent>, template?: InstanceRecord,
  ): Promise<Instance> {
    const t0 = this.clock.now();
    const deadline = t0 + timeoutMs;
    const emit = this.emitter(rec, queue, t0);
    emit('accepted', `creating vm ${rec.name} from image ${image.id}`);
    try {
      await this.beforeDeadline(deadline, this.save(rec));
      const spec = this.spec(rec, req.forwards, pubKey);
      let snapshot = false;
      if (template) {
        emit('disk', `copying the disk of template ${template.name}`);
        snapshot = (await this.beforeDeadline(deadline, this.locks.run(template.name, async () => {
          this.templateOf(template.name);
          return this.hv.clone(this.ref(template), spec);
        }))).snapshot;
        emit('boot', snapshot ? `restoring from the snapshot of template ${template.name}` : `cold-booting a copy of template ${template.name}`);
      } else {
        emit('disk', `preparing a ${rec.disk_gb} GB disk`);
        await this.beforeDeadline(deadline, this.hv.provision(spec));
        emit('boot', `booting with ${rec.cpus} cpu(s) and ${rec.memory_mb} MB`);
      }
      const handle = await this.beforeDeadline(deadline, this.hv.launch(spec, { restore: snapshot }));
      this.applyHandle(rec, handle);
      await this.save(rec);
      await this.awaitReady(rec, wait === 'auto' ? (image.agent_ready ? 'agent' : 'ssh') : wait, deadline, emit);
      // A clone must not be its template's twin: new name, machine id and clock before it is ready.
      if (template && image.agent_ready) await this.beforeDeadline(deadline, this.setIdentity(rec, true));
      return await this.created(rec, t0, emit, { image: image.id, wait, from: template?.name, from_snapshot: snapshot });
    } catch (err) {
      return await this.createFailed(rec, err, t0, emit);
    } finally {
      queue.close();
    }
  }

  /** A progress emitter for one create; `t0` is when it was accepted. */
  private emitter(rec: InstanceRecord, queue: AsyncQueue<CreateProgressEvent>, t0: number) {
    return (phase: CreatePhase, message: string, extra: Partial<CreateProgressEvent> = {}) =>
      queue.push({ phase, message, name: rec.name, t: new Date(this.clock.now()).toISOString(), elapsed_ms: this.clock.now() - t0, ...extra });
  }

  /** The end of every successful create: running, announced, counted, logged, `ready`. */
  private async created(rec: InstanceRecord, t0: number, emit: ReturnType<InstanceService['emitter']>, log: object, message?: string): Promise<Instance> {
    rec.status = 'running';
    await this.save(rec);
    await this.events.emit('up', rec);
    this.metrics.vmCreated();
    this.metrics.createDuration((this.clock.now() - t0) / 1000, 'ok');
    this.activity.record({ action: 'create', target: rec.name, status: 'ok', duration_ms: this.clock.now() - t0, message });
    this.log.info({ vm: rec.name, ...log, duration_ms: this.clock.now() - t0 }, message ? 'pool claim timing' : 'create timing');
    const inst = toPublic(rec);
    emit('ready', `vm ${rec.name} is ready`, { instance: inst });
    return inst;
  }

  /** The end of every failed create: nothing left behind but the logs, counted, `error`. */
  private async createFailed(rec: InstanceRecord, err: unknown, t0: number, emit: ReturnType<InstanceService['emitter']>): Promise<never> {
    const domainErr = isDomainError(err) ? err : new InternalError(errorMessage(err));
    await this.purge(rec, true);
    this.metrics.createFailed();
    this.metrics.createDuration((this.clock.now() - t0) / 1000, 'error');
    this.activity.record({ action: 'create', target: rec.name, status: 'error', duration_ms: this.clock.now() - t0, message: domainErr.message });
    this.log.error({ vm: rec.name, err: domainErr.message, duration_ms: this.clock.now() - t0 }, 'create failed');
    emit('error', domainErr.message, { error: domainErr.message, code: domainErr.code });
    throw domainErr;
  }

  private async awaitReady(rec: InstanceRecord, mode: Exclude<WaitMode, 'auto'>, deadline: number, phase: (p: CreatePhase, m: string) => void): Promise<void> {
    this.deaths.delete(rec.name);
    await waitReady({ agent: this.agent, ssh: this.ssh, clock: this.clock }, {
      record: rec, mode, deadline, phase, died: () => this.deaths.get(rec.name),
    });
  }

  private beforeDeadline<T>(deadline: number, p: Promise<T>): Promise<T> {
    const left = deadline - this.clock.now();
    if (left <= 0) return Promise.reject(new DeadlineExceededError('create deadline passed'));
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new DeadlineExceededError('create deadline passed')), left);
    });
    return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
  }

  async delete(name: string): Promise<MessageResult> {
    assertVmName(name);
    return this.timed('delete', name, () => this.locks.run(name, async () => {
      const rec = this.mustGet(name);
      await this.purge(rec);
      this.metrics.vmDeleted();
      return { message: `vm ${name} deleted`, name };
    }));
  }

  async start(name: string): Promise<Instance> {
    return this.transition(name, 'start', async (rec) => {
      await this.boot(rec, false);
      return toPublic(rec);
    });
  }

  async restore(name: string): Promise<Instance> {
    return this.transition(name, 'restore', async (rec) => {
      await this.boot(rec, true);
      return toPublic(rec);
    });
  }

  async shutdown(name: string): Promise<MessageResult> {
    return this.transition(name, 'shutdown', async (rec) => {
      if (rec.status === 'stopped') return { message: `vm ${name} is already stopped`, name };
      await this.events.emit('down', rec);
      await this.expectExit(rec, () => this.hv.stop(this.ref(rec), this.config.shutdown_timeout_ms));
      if (!rec.persistent) {
        await this.purge(rec);
        this.metrics.vmDeleted();
        return { message: `vm ${name} shut down and removed (ephemeral)`, name };
      }
      rec.status = 'stopped';
      delete rec.suspended_at;
      this.clearRuntime(rec);
      await this.save(rec);
      return { message: `vm ${name} shut down`, name };
    });
  }

  async pause(name: string): Promise<MessageResult> {
    return this.transition(name, 'pause', async (rec) => {
      await this.hv.pause(this.ref(rec));
      rec.status = 'paused';
      await this.save(rec);
      return { message: `vm ${name} paused`, name };
    });
  }

  async resume(name: string): Promise<MessageResult> {
    return this.transition(name, 'resume', async (rec) => {
      await this.hv.resume(this.ref(rec));
      rec.status = 'running';
      await this.save(rec);
      return { message: `vm ${name} resumed`, name };
    });
  }

  async suspend(name: string): Promise<MessageResult> {
    return this.transition(name, 'suspend', async (rec) => {
      await this.events.emit('down', rec);
      const { snapshot } = await this.expectExit(rec, () => this.hv.suspend(this.ref(rec)));
      rec.status = 'suspended';
      rec.suspended_at = new Date(this.clock.now()).toISOString();
      this.clearRuntime(rec);
      await this.save(rec);
      return { message: `vm ${name} suspended${snapshot ? '' : ' (no snapshot: restore will cold-boot)'}`, name };
    });
  }

  /** Stops every VM's background work; VM processes keep running (they are detached). */
  async close(): Promise<void> {
    await this.activity.flush();
  }

  private async boot(rec: InstanceRecord, restore: boolean): Promise<void> {
    const spec = this.spec(rec, rec.forwards.filter((f) => f.kind === 'boot'), await this.keys.publicKey());
    const handle = await this.hv.launch(spec, { restore });
    this.applyHandle(rec, handle);
    rec.status = 'running';
    delete rec.error;
    delete rec.suspended_at;
    await this.save(rec);
    const image = await this.hv.resolveImage(rec.image).catch(() => ({ agent_ready: false }));
    try {
      await this.awaitReady(rec, image.agent_ready ? 'agent' : 'ssh', this.clock.now() + this.config.ready_timeout_ms, () => undefined);
      if (restore && image.agent_ready) await this.setIdentity(rec, false);
    } catch (err) {
      await this.hv.kill(this.ref(rec)).catch(() => undefined);
      rec.status = 'error';
      rec.error = errorMessage(err);
      this.clearRuntime(rec);
      await this.save(rec);
      throw err;
    }
    await this.events.emit('up', rec);
  }

  /**
   * A guest restored from a snapshot wakes with the clock (and, for a clone, the name) of the moment
   * it was saved: tell it who it is and what time it is. A clone also gets a fresh machine id.
   */
  private async setIdentity(rec: InstanceRecord, fresh: boolean): Promise<void> {
    try {
      await this.agent.setIdentity(agentEndpoint(rec), {
        hostname: rec.name, time_ms: this.clock.now(), machine_id: fresh ? randomUUID().replace(/-/g, '') : undefined,
        overlay_ip: fresh ? rec.overlay_ip : undefined,
      });
    } catch (err) {
      if (fresh) throw err;
      this.log.warn({ vm: rec.name, err: errorMessage(err) }, 'could not reset the guest clock after restore');
    }
  }

  private async transition<T>(name: string, verb: LifecycleVerb, fn: (rec: InstanceRecord) => Promise<T>): Promise<T> {
    assertVmName(name);
    return this.timed(verb, name, () => this.locks.run(name, async () => {
      const rec = this.mustGet(name);
      assertTransition(rec, verb);
      return fn(rec);
    }));
  }

  private async timed<T>(action: string, target: string, fn: () => Promise<T>): Promise<T> {
    const t0 = this.clock.now();
    try {
      const out = await fn();
      this.activity.record({ action, target, status: 'ok', duration_ms: this.clock.now() - t0 });
      return out;
    } catch (err) {
      if (!(err instanceof NotFoundError)) {
        this.activity.record({ action, target, status: 'error', duration_ms: this.clock.now() - t0, message: errorMessage(err) });
      }
      throw err;
    }
  }

  private async expectExit<T>(rec: InstanceRecord, fn: () => Promise<T>): Promise<T> {
    this.stopping.add(rec.name);
    try {
      return await fn();
    } finally {
      this.stopping.delete(rec.name);
    }
  }

  private async onProcessExit(name: string, reason: string): Promise<void> {
    if (this.stopping.has(name)) return;
    this.deaths.set(name, reason);
    const rec = this.records.get(name);
    if (!rec || (rec.status !== 'running' && rec.status !== 'paused')) return;
    await this.locks.run(name, async () => {
      const cur = this.records.get(name);
      if (!cur || (cur.status !== 'running' && cur.status !== 'paused')) return;
      this.log.error({ vm: name, reason }, 'vm process exited unexpectedly');
      cur.status = 'error';
      cur.error = `vm process exited unexpectedly: ${reason}`;
      this.clearRuntime(cur);
      await this.save(cur);
      this.activity.record({ action: 'crash', target: name, status: 'error', duration_ms: 0, message: cur.error });
      await this.events.emit('down', cur);
    });
  }

  /** Removes every trace of a VM: process, disk, directory, record. With keepLogs, logs survive. */
  private async purge(rec: InstanceRecord, keepLogs = false): Promise<void> {
    await this.events.emit('removed', rec);
    await this.expectExit(rec, () => this.hv.destroy(this.ref(rec))).catch((err) =>
      this.log.error({ vm: rec.name, err: errorMessage(err) }, 'hypervisor destroy failed'));
    if (keepLogs) await this.store.keepLogs(rec.name).catch(() => undefined);
    await this.store.remove(rec.name);
    this.records.delete(rec.name);
    this.deaths.delete(rec.name);
  }

  private spec(rec: InstanceRecord, forwards: { host_port: number; guest_port: number; proto: 'tcp' | 'udp' }[], key: string): VmSpec {
    return {
      name: rec.name, dir: this.store.dir(rec.name), cpus: rec.cpus, memory_mb: rec.memory_mb, disk_gb: rec.disk_gb,
      image: rec.image, hostname: rec.name, userdata: rec.userdata, mounts: rec.mounts, overlay_ip: rec.overlay_ip,
      forwards: forwards.map((f) => ({ host_port: f.host_port, guest_port: f.guest_port, proto: f.proto })),
      ssh_authorized_key: key,
    };
  }

  private applyHandle(rec: InstanceRecord, h: VmHandle): void {
    rec.ip = h.ip;
    rec.ssh_port = h.ssh_port;
    rec.agent_port = h.agent_port;
    rec.agent_cid = h.agent_cid;
    const live = rec.forwards.filter((f) => f.kind === 'live');
    rec.forwards = [...h.forwards.map((f) => ({ ...f, kind: 'boot' as const, pid: h.pid })), ...live];
    rec.runtime = h as unknown as Record<string, unknown>;
  }

  /**
   * Forwards stay in the record (boot ones keep their host ports, live ones are re-opened when the
   * VM is up again); what belonged to the stopped process (ports, pids) goes.
   */
  private clearRuntime(rec: InstanceRecord): void {
    rec.ssh_port = 0;
    rec.agent_port = 0;
    rec.agent_cid = 0;
    rec.forwards = rec.forwards.map(({ pid: _p, ...f }) => f);
    delete rec.runtime;
  }

  private ref(rec: InstanceRecord): VmRef {
    return { name: rec.name, dir: this.store.dir(rec.name) };
  }

  private async save(rec: InstanceRecord): Promise<void> {
    rec.updated_at = new Date(this.clock.now()).toISOString();
    if (this.records.get(rec.name) !== rec) return; // purged meanwhile
    await this.store.put(rec);
  }

  private mustGet(name: string): InstanceRecord {
    assertVmName(name);
    const rec = this.records.get(name);
    if (!rec) throw new NotFoundError(`vm ${name} not found`);
    return rec;
  }

  private count(pred: (r: InstanceRecord) => boolean): number {
    let n = 0;
    for (const r of this.records.values()) if (pred(r)) n++;
    return n;
  }
}
