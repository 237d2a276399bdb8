import { inject, injectable } from 'inversify';
import {
  grows,
  roomCheck,
  sameShape,
  shapeOf,
  type ClusterInstance,
  type NodeInfo,
  type NodeView,
  type VmEntry,
  type VmShape,
} from '../domain/cluster.js';
import { errorMessage, NotFoundError, UnavailableError } from '../domain/errors.js';
import type { VmChange } from '../domain/events.js';
import { toPublic, type Instance, type VmRecord } from '../domain/vm.js';
import { ClusterStore } from '../ports/cluster.js';
import { Hypervisor } from '../ports/hypervisor.js';
import { GuestImages } from '../ports/guest-images.js';
import { Logger } from '../ports/logger.js';
import type { ClusterSettings } from './cluster-config.js';
import type { Config } from './config.js';
import { KeyedMutex } from './keyed-mutex.js';
import type { LifecycleContribution } from './lifecycle-events.js';
import { AppConfig, ClusterConfig, DaemonVersion } from './tokens.js';
import { Vms } from './vms.js';

/** Where a call about a VM goes: served here, or by the node that owns it. */
export type Route = { at: 'here' } | { at: 'node'; node: NodeView };

/**
 * This daemon as a node of a cluster (docs/cluster.md): it says what it is in its lease, publishes
 * its VMs as they change, and tells the HTTP front which node serves a call about a VM (where a
 * create goes is ClusterPlacement's).
 */
@injectable()
export class ClusterService implements LifecycleContribution {
  private readonly queue = new KeyedMutex();
  private unwatch?: () => void;
  private readonly startedAt = new Date().toISOString();
  private drained?: boolean;

  constructor(
    @inject(ClusterConfig) readonly settings: ClusterSettings,
    @inject(AppConfig) private readonly config: Config,
    @inject(ClusterStore) private readonly store: ClusterStore,
    @inject(Vms) private readonly vms: Vms,
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(GuestImages) private readonly images: GuestImages,
    @inject(DaemonVersion) private readonly version: string,
    @inject(Logger) private readonly log: Logger,
  ) {}

  get self(): string {
    return this.settings.node;
  }

  /**
   * Drained: the node says so in its lease, and the placement rule passes it by. A restarted node
   * is drained as it said it was last (its entry in etcd outlives it).
   */
  get draining(): boolean {
    return (this.drained ??= this.store.node(this.self)?.draining === true);
  }

  /** Drains this node, or ends its drain; resolves once etcd keeps it (a node killed after the answer comes back as it was told). */
  async setDraining(on: boolean): Promise<void> {
    this.drained = on;
    await this.store.announce();
  }

  /** Joins, publishes every VM of this node, drops entries of this node's that are gone, and follows changes. */
  async start(): Promise<void> {
    await this.store.join(() => this.info());
    this.unwatch = this.vms.watch((c) => void this.follow(c));
    const here = new Set(this.vms.list().map((i) => i.name));
    for (const i of this.vms.list()) void this.follow({ event: 'vm', vm: i });
    for (const [name, e] of this.store.vms())
      if (e.node === this.self && e.instance && !here.has(name)) void this.follow({ event: 'removed', name });
  }

  async stop(): Promise<void> {
    this.unwatch?.();
    await this.store.leave();
  }

  nodes(): NodeView[] {
    return this.store.nodes();
  }

  node(name: string): NodeView {
    const n = this.store.node(name);
    if (!n) throw new NotFoundError(`no node ${name} in the cluster`);
    return n;
  }

  get stale(): boolean {
    return this.store.stale;
  }

  /**
   * Asks etcd itself for a VM that neither this node nor the copy knows, and takes what it says
   * into the copy: one placed through another node a moment ago is then routed to its node, not
   * answered 404 here.
   */
  async lookUp(name: string): Promise<void> {
    if (!this.vms.find(name) && !this.store.vm(name)) await this.store.look(name);
  }

  /** Which node serves calls about `name`: here when this node has it or nobody does (the local 404). */
  route(name: string): Route {
    if (this.vms.find(name)) return { at: 'here' };
    const e = this.store.vm(name);
    if (!e || e.node === this.self) return { at: 'here' };
    const node = this.store.node(e.node);
    if (!node) return { at: 'here' };
    if (node.state !== 'ready')
      throw new UnavailableError(`vm ${name} is on node ${node.node}, which is unreachable (its lease is gone)`);
    return { at: 'node', node };
  }

  /** Every VM of the cluster: this node's as they are, the others' as their nodes last published them. */
  list(): ClusterInstance[] {
    const out = new Map<string, ClusterInstance>();
    const ready = this.readyNodes();
    for (const [name, e] of this.store.vms())
      if (e.node !== this.self && e.instance) out.set(name, this.seen(name, e, ready));
    for (const i of this.vms.list()) out.set(i.name, { ...i, node: this.self });
    return [...out.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  /**
   * The cluster's change feed (GET /events on a node): this node's changes as they happen, other
   * nodes' as they are published, and a VM of a node whose lease came or went, as it shows now.
   */
  watch(fn: (change: VmChange) => void): () => void {
    const named = (i: ClusterInstance) => ({ event: 'vm', vm: i as unknown as Instance }) as const;
    const unLocal = this.vms.watch((c) => fn(c.event === 'vm' ? named({ ...c.vm, node: this.self }) : c));
    const unStore = this.store.watch((c) => {
      if (c.kind === 'node') {
        if (c.node === this.self) return;
        const ready = this.readyNodes();
        for (const [name, e] of this.store.vms())
          if (e.node === c.node && e.instance) fn(named(this.seen(name, e, ready)));
        return;
      }
      if (c.entry?.node === this.self || (!c.entry && c.was?.node === this.self)) return;
      if (c.entry?.instance) fn(named(this.seen(c.name, c.entry)));
      else if (!c.entry && c.was?.instance && !this.vms.find(c.name)) fn({ event: 'removed', name: c.name });
    });
    return () => {
      unLocal();
      unStore();
    };
  }

  /** One VM of the cluster, as `list` shows it. NotFoundError when no node has it. */
  get(name: string): ClusterInstance {
    const here = this.local(name);
    if (here) return here;
    const e = this.store.vm(name);
    if (!e?.instance || e.node === this.self) throw new NotFoundError(`vm ${name} not found`);
    return this.seen(name, e);
  }

  /** Another node's VM as it last published it, `node_unreachable` while that node's lease is gone. */
  private seen(name: string, e: VmEntry, ready = this.readyNodes()): ClusterInstance {
    const i = e.instance!;
    return { ...i, name, node: e.node, status: ready.has(e.node) ? i.status : 'node_unreachable' };
  }

  /** This node's VM, its node named; undefined when this node has none of that name. */
  local(name: string): ClusterInstance | undefined {
    const rec = this.vms.find(name);
    return rec && !rec.pool ? { ...toPublic(rec), node: this.self } : undefined;
  }

  private readyNodes(): Set<string> {
    return new Set(
      this.store
        .nodes()
        .filter((n) => n.state === 'ready')
        .map((n) => n.node),
    );
  }

  /** The ready nodes that list image `image` (any node can fetch it from them). */
  holders(image: string): NodeView[] {
    return this.store.nodes().filter((n) => n.state === 'ready' && n.images.includes(image));
  }

  /** The node the cluster says has `name` (undefined: none). */
  ownerOf(name: string): string | undefined {
    return this.store.vm(name)?.node;
  }

  /**
   * Makes `name`, which node `from` had, this node's in etcd (a move's last step): its room moves
   * with it, checked to fit here. InvalidStateError when another node has it meanwhile.
   */
  async takeOver(name: string, from: string): Promise<void> {
    const shape = this.store.vm(name)?.shape;
    await this.store.transfer(name, from, this.self, shape ? roomCheck(shape, `vm ${name}`) : () => undefined);
  }

  /**
   * This node's VM `rec` is about to take the shape `next` (an edit, a revert to a snapshot taken
   * at another shape): when it grows, the node must have room for it beside what else is placed
   * there (429 otherwise, and nothing changes); its entry and the node's room hold the new shape
   * before the change is made. Answers what gives the old shape back when the change then fails.
   */
  async reshape(rec: VmRecord, next: VmShape): Promise<() => Promise<void>> {
    const was = shapeOf(rec);
    if (sameShape(was, next)) return async () => undefined;
    const what = `vm ${rec.name} at ${next.cpus} cpu(s), ${next.memory_mb} MB and ${next.disk_gb} GB`;
    await this.store.reshape(rec.name, next, grows(was, next) ? roomCheck(next, what) : () => undefined);
    return () =>
      this.store
        .reshape(rec.name, was, () => undefined)
        .catch((err: unknown) => {
          // The next change of its record publishes the shape it has.
          this.log.warn(
            { vm: rec.name, err: errorMessage(err) },
            'cluster: cannot give a failed change its shape back',
          );
        });
  }

  /** What this node says of itself in its lease. */
  private async info(): Promise<NodeInfo> {
    const images = await this.images
      .listImages(() => [])
      .then((l) => l.map((i) => i.id))
      .catch(() => []);
    return {
      node: this.self,
      advertise: this.settings.advertise,
      capacity: this.settings.capacity,
      images: [...new Set(['default', this.config.image, ...images])].sort(),
      hypervisor: this.hv.kind,
      tags: this.settings.tags,
      version: this.version,
      started_at: this.startedAt,
      seen_at: '',
      running: this.vms.count((r) => r.status === 'running'),
      ...(this.draining ? { draining: true } : {}),
    };
  }

  // What a lifecycle verb waits for before it answers: its VM as the cluster sees it (a create
  // answered `running` is listed so on every node; a deleted VM's room is free when DELETE answers).
  async onUp(rec: VmRecord): Promise<void> {
    if (!rec.pool) await this.follow({ event: 'vm', vm: toPublic(rec) });
  }

  async onClaimed(rec: VmRecord): Promise<void> {
    await this.follow({ event: 'vm', vm: toPublic(rec) });
  }

  async onRemoved(rec: VmRecord): Promise<void> {
    if (!rec.pool) await this.follow({ event: 'removed', name: rec.name });
  }

  /** Publishes or releases in the order the changes came, one VM at a time. */
  private follow(c: VmChange): Promise<void> {
    if (c.event !== 'vm' && c.event !== 'removed') return Promise.resolve();
    const name = c.event === 'vm' ? c.vm.name : c.name;
    return (
      this.queue
        // A VM that moved away is the other node's: removing the copy here leaves its entry alone.
        .run(name, () =>
          c.event === 'vm' ? this.store.publish(c.vm as Instance) : this.store.release(name, this.self),
        )
        .catch((err) => this.log.warn({ vm: name, err: errorMessage(err) }, 'cluster: cannot publish a vm change'))
    );
  }
}
