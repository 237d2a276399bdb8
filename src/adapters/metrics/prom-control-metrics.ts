import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { NodeView } from '../../domain/cluster.js';
import type { ControlMetrics } from '../../ports/metrics.js';

/** The spec's series plus create duration and the process defaults, on an injected registry. */
export class PromControlMetrics implements ControlMetrics {
  readonly registry: Registry;
  private readonly created: Counter;
  private readonly deleted: Counter;
  private readonly failed: Counter;
  private readonly duration: Histogram<'outcome'>;
  private readonly egress: Counter<'vm' | 'decision'>;
  private readonly dns: Counter<'vm' | 'decision'>;
  private runningSource: () => number = () => 0;

  constructor(registry = new Registry(), withDefaults = true) {
    this.registry = registry;
    if (withDefaults) collectDefaultMetrics({ register: registry, prefix: 'svc_' });
    this.created = new Counter({ name: 'svc_vms_created_total', help: 'VMs created', registers: [registry] });
    this.deleted = new Counter({ name: 'svc_vms_deleted_total', help: 'VMs deleted', registers: [registry] });
    this.failed = new Counter({ name: 'svc_create_errors_total', help: 'Failed creates', registers: [registry] });
    this.duration = new Histogram({
      name: 'svc_create_duration_seconds',
      help: 'Time from create accepted to ready or failed',
      labelNames: ['outcome'],
      buckets: [0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300],
      registers: [registry],
    });
    this.egress = new Counter({
      name: 'svc_egress_connections_total',
      help: 'Connections and UDP flows a guest opened beyond its network, by decision',
      labelNames: ['vm', 'decision'],
      registers: [registry],
    });
    this.dns = new Counter({
      name: 'svc_egress_dns_queries_total',
      help: 'Names a guest asked its network to resolve, by decision',
      labelNames: ['vm', 'decision'],
      registers: [registry],
    });
    const running = () => this.runningSource();
    new Gauge({
      name: 'svc_vms_running',
      help: 'Running VMs, computed from state at scrape time',
      registers: [registry],
      collect() {
        this.set(running());
      },
    });
  }

  vmCreated(): void {
    this.created.inc();
  }

  vmDeleted(): void {
    this.deleted.inc();
  }

  createFailed(): void {
    this.failed.inc();
  }

  createDuration(seconds: number, outcome: 'ok' | 'error'): void {
    this.duration.observe({ outcome }, seconds);
  }

  egressDecision(vm: string, decision: 'allow' | 'deny', repeats: number, dns: boolean): void {
    (dns ? this.dns : this.egress).inc({ vm, decision }, 1 + repeats);
  }

  forgetVm(vm: string): void {
    for (const c of [this.egress, this.dns]) for (const decision of ['allow', 'deny']) c.remove({ vm, decision });
  }

  setRunningSource(count: () => number): void {
    this.runningSource = count;
  }

  /**
   * A node of a cluster (docs/cluster.md): every node's state, what is placed on it and what it
   * offers, and whether this node's copy of the cluster is stale, read at scrape time.
   */
  setClusterSource(nodes: () => NodeView[], stale: () => boolean): void {
    const gauge = (name: string, help: string, value: (n: NodeView) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ['node'],
        registers: [this.registry],
        collect() {
          this.reset();
          for (const n of nodes()) this.set({ node: n.node }, value(n));
        },
      });
    gauge('svc_cluster_node_up', 'A node of the cluster: 1 while its lease holds, 0 unreachable', (n) =>
      n.state === 'ready' ? 1 : 0,
    );
    gauge('svc_cluster_node_vms', 'VMs placed on a node', (n) => n.allocated.vms);
    gauge('svc_cluster_node_vm_slots', 'VMs a node offers room for', (n) => n.capacity.vm_slots);
    gauge('svc_cluster_node_cpus_allocated', 'vCPUs placed on a node', (n) => n.allocated.cpus);
    gauge('svc_cluster_node_cpus', 'vCPUs a node offers', (n) => n.capacity.cpus);
    gauge('svc_cluster_node_memory_allocated_bytes', 'Memory placed on a node', (n) => n.allocated.memory_mb * 2 ** 20);
    gauge('svc_cluster_node_memory_bytes', 'Memory a node offers', (n) => n.capacity.memory_mb * 2 ** 20);
    gauge('svc_cluster_node_running', 'VMs running on a node, as it last said', (n) => n.running);
    new Gauge({
      name: 'svc_cluster_stale',
      help: '1 while this node cannot reach etcd (what it lists may be old)',
      registers: [this.registry],
      collect() {
        this.set(stale() ? 1 : 0);
      },
    });
  }
}
