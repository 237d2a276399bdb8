import type { VmRecord } from '../../src/domain/vm.js';
import type { ActivityEvent, MetricsPoint } from '../../src/domain/events.js';
import type { ActivityLog, VmStore, MetricsHistory, MetricsSeries } from '../../src/ports/stores.js';
import type { Logger } from '../../src/ports/logger.js';
import type { ControlMetrics } from '../../src/ports/metrics.js';
import { AlreadyExistsError } from '../../src/domain/errors.js';
import type { SshKeys, SshTarget, Tunnels } from '../../src/ports/tunnels.js';
import type { Forward } from '../../src/domain/vm.js';

/** Small Map-backed fakes of the ports, for unit tests. */
export class MemoryInstanceStore implements VmStore {
  readonly records = new Map<string, VmRecord>();
  readonly logsKept: string[] = [];
  async list() {
    return [...this.records.values()].map((r) => structuredClone(r));
  }
  async get(name: string) {
    const r = this.records.get(name);
    return r && structuredClone(r);
  }
  async put(record: VmRecord) {
    this.records.set(record.name, structuredClone(record));
  }
  async remove(name: string) {
    this.records.delete(name);
  }
  async rename(from: string, to: string) {
    const r = this.records.get(from);
    this.records.delete(from);
    if (r) this.records.set(to, { ...r, name: to });
  }
  dir(name: string) {
    return `/nonexistent/vms/${name}`;
  }
  async keepLogs(name: string) {
    this.logsKept.push(name);
  }
  async files() {
    return [];
  }
  async receive(record: VmRecord, fill: (dir: string) => Promise<void>) {
    if (this.records.has(record.name)) throw new AlreadyExistsError(`vm ${record.name} already exists here`);
    await fill(this.dir(record.name));
    this.records.set(record.name, structuredClone(record));
  }
}

export class MemoryActivityLog implements ActivityLog {
  readonly events: ActivityEvent[] = [];
  record(e: Omit<ActivityEvent, 'id' | 't'>) {
    this.events.push({ id: this.events.length + 1, t: new Date().toISOString(), ...e });
  }
  async list() {
    return [...this.events].reverse();
  }
  async flush() {}
}

export class SilentLogger implements Logger {
  readonly lines: { level: string; obj: object; msg?: string }[] = [];
  debug(obj: object, msg?: string) {
    this.lines.push({ level: 'debug', obj, msg });
  }
  info(obj: object, msg?: string) {
    this.lines.push({ level: 'info', obj, msg });
  }
  warn(obj: object, msg?: string) {
    this.lines.push({ level: 'warn', obj, msg });
  }
  error(obj: object, msg?: string) {
    this.lines.push({ level: 'error', obj, msg });
  }
  child() {
    return this;
  }
}

export class CountingMetrics implements ControlMetrics {
  created = 0;
  deleted = 0;
  failed = 0;
  running: () => number = () => 0;
  vmCreated() {
    this.created++;
  }
  vmDeleted() {
    this.deleted++;
  }
  createFailed() {
    this.failed++;
  }
  createDuration() {}
  egress: { vm: string; decision: string; n: number; dns: boolean }[] = [];
  egressDecision(vm: string, decision: 'allow' | 'deny', repeats: number, dns: boolean) {
    this.egress.push({ vm, decision, n: 1 + repeats, dns });
  }
  forgetVm(vm: string) {
    this.egress = this.egress.filter((e) => e.vm !== vm);
  }
  setRunningSource(f: () => number) {
    this.running = f;
  }
}

export class StaticKeys implements SshKeys {
  async publicKey() {
    return 'ssh-ed25519 AAAAtest svcd';
  }
  async privateKey() {
    return Buffer.from('none');
  }
}

/** Tunnels that bind nothing: host port 0 gets the next number from 50000; a taken port is AlreadyExists. */
export class MemoryTunnels implements Tunnels {
  readonly open_ = new Map<string, Map<number, Forward>>();
  private next = 50000;
  busy = new Set<number>();
  async open(vm: string, _target: SshTarget, hostPort: number, guestPort: number): Promise<Forward> {
    const port = hostPort || this.next++;
    if (this.busy.has(port)) throw new AlreadyExistsError(`host port ${port} is busy`);
    const info: Forward = { host_port: port, guest_port: guestPort, proto: 'tcp', kind: 'live', pid: process.pid };
    if (!this.open_.has(vm)) this.open_.set(vm, new Map());
    this.open_.get(vm)!.set(port, info);
    return info;
  }
  async close(vm: string, hostPort: number) {
    this.open_.get(vm)?.delete(hostPort);
  }
  async closeAll(vm: string) {
    this.open_.delete(vm);
  }
  list(vm: string): Forward[] {
    return [...(this.open_.get(vm)?.values() ?? [])];
  }
  async closeEverything() {
    this.open_.clear();
  }
}

/** Stats histories in memory (the sampler's store). */
export class MemoryMetricsHistory implements MetricsHistory {
  readonly points = new Map<string, MetricsPoint[]>();
  async append(vm: string, point: MetricsPoint): Promise<void> {
    this.points.set(vm, [...(this.points.get(vm) ?? []), point]);
  }
  async read(vm: string, opts: { since?: number; limit?: number }): Promise<MetricsSeries> {
    const all = (this.points.get(vm) ?? []).filter((p) => opts.since === undefined || p.t_ms > opts.since);
    return { capacity: 5760, interval_ms: 15_000, points: opts.limit === undefined ? all : all.slice(-opts.limit) };
  }
  async close(): Promise<void> {}
}
