import { inject, injectable } from 'inversify';
import { placeVm, placementAsk, roomCheck, type NodeView, type VmShape } from '../domain/cluster.js';
import { errorMessage, InvalidArgumentError, ResourceExhaustedError } from '../domain/errors.js';
import { forkNames, parseForkRequest } from '../domain/fork-request.js';
import { assertNewVmName, nextDefaultName } from '../domain/names.js';
import { ClusterStore } from '../ports/cluster.js';
import { Logger } from '../ports/logger.js';
import { ClusterService } from './cluster-service.js';
import type { Config } from './config.js';
import { AppConfig } from './tokens.js';
import { Vms } from './vms.js';

/** Where a create goes, with its name and the body to send (without the placement fields). */
export interface Placed {
  name: string;
  node: NodeView;
  here: boolean;
  body: Record<string, unknown>;
}

/**
 * Where a cluster's creates and forks go (docs/cluster.md, "Placement"): the node the rule picks,
 * or the one a create is pinned to, with the name and the room reserved in one etcd transaction
 * before the create is sent there; given back at once when the create fails before its VM exists.
 */
@injectable()
export class ClusterPlacement {
  constructor(
    @inject(ClusterService) private readonly cluster: ClusterService,
    @inject(AppConfig) private readonly config: Config,
    @inject(ClusterStore) private readonly store: ClusterStore,
    @inject(Vms) private readonly vms: Vms,
    @inject(Logger) private readonly log: Logger,
  ) {}

  /**
   * Places a create (docs/cluster.md, "Placement"): a clone where its template is, else by the
   * rule; the name and the capacity reserved in one transaction. The body loses `node` and
   * `node_selector` and gains the name.
   */
  async place(raw: unknown): Promise<Placed> {
    const b = { ...((raw ?? {}) as Record<string, unknown>) };
    const ask = placementAsk(b);
    delete b.node;
    delete b.node_selector;
    const name = b.name === undefined ? this.freshName() : assertNewVmName(b.name);
    b.name = name;
    const shape: VmShape = {
      cpus: typeof b.cpus === 'number' ? b.cpus : this.config.cpus,
      memory_mb: typeof b.memory_mb === 'number' ? b.memory_mb : this.config.memory_mb,
      disk_gb: typeof b.disk_gb === 'number' ? b.disk_gb : this.config.disk_gb,
    };
    const image = typeof b.image === 'string' ? b.image : 'default';
    // A clone goes where its template's state is; a pool claim to this node's pool; a create that
    // binds egress secrets (or names a proxy's password) to this node, whose secret store holds
    // them (each node has its own); one that shares host folders (mounts, E2B's volumes) to this
    // node, whose folders they are.
    const proxySecret = (b.egress as { proxy?: { secret?: unknown } } | undefined)?.proxy?.secret !== undefined;
    const secrets = (Array.isArray(b.egress_secrets) && b.egress_secrets.length > 0) || proxySecret;
    const folders = Array.isArray(b.mounts) && b.mounts.length > 0;
    const templateNode = typeof b.from === 'string' ? (this.store.vm(b.from)?.node ?? this.cluster.self) : undefined;
    if (templateNode && folders && templateNode !== this.cluster.self)
      throw new InvalidArgumentError(
        `a clone of ${String(b.from)} is made on node ${templateNode}, where its template is, and the host folders it asks for are this node's (${this.cluster.self}): ask node ${templateNode} for it, with folders of that node`,
      );
    const pinned =
      templateNode !== undefined
        ? { node: templateNode }
        : (b.from_pool === true || secrets || folders) && !ask.node
          ? { node: this.cluster.self }
          : undefined;
    let node: NodeView;
    for (let tries = 1; ; tries++) {
      // A node without the image fetches it from one that has it (ImageFetchService) before the create.
      node = placeVm(
        this.store.nodes(),
        { ...shape, image },
        pinned ?? ask,
        (img) => !!pinned || this.cluster.holders(img).length > 0,
      );
      try {
        await this.store.reserve([name], node.node, shape, roomCheck(shape, `vm ${name}`));
        break;
      } catch (err) {
        // Another create took the room first: the rule picks again from what the nodes hold now.
        if (!(err instanceof ResourceExhaustedError) || pinned || ask.node || tries >= 5) throw err;
        await new Promise((r) => setTimeout(r, 20 * tries));
      }
    }
    return { name, node, here: node.node === this.cluster.self, body: b };
  }

  /**
   * Places the forks of `source` (POST /vms/{name}/fork) on its node, which holds the state they
   * start from: each fork's name (those asked for, else `<source>-fork-N` free in the whole
   * cluster) and its room (the source's shape) reserved as a create's are, all or none. The body
   * gains the names.
   */
  async placeForks(source: string, raw: unknown): Promise<Placed & { names: string[] }> {
    const req = parseForkRequest(raw);
    this.cluster.route(source); // its node unreachable: 503 naming it
    const src = this.cluster.get(source);
    const node = this.cluster.node(src.node);
    const shape: VmShape = { cpus: src.cpus, memory_mb: src.memory_mb, disk_gb: src.disk_gb };
    const taken = new Set([...this.store.vms().keys(), ...this.vms.all().map((r) => r.name)]);
    const names = req.names ?? forkNames(source, req.count, (n) => taken.has(n));
    const what = names.length === 1 ? `fork ${names[0]}` : `${names.length} forks`;
    await this.store.reserve(names, node.node, shape, roomCheck(shape, `${what} of vm ${source}`, names.length));
    const body: Record<string, unknown> = { ...((raw ?? {}) as Record<string, unknown>), names };
    delete body.count;
    return { name: source, names, node, here: node.node === this.cluster.self, body };
  }

  /** Placed creates (or forks) failed before their VMs existed: their reservations are given back, at once. */
  async unplace(names: string | readonly string[]): Promise<void> {
    const free = (typeof names === 'string' ? [names] : names).filter(
      (name) => !this.vms.find(name) && !this.store.vm(name)?.instance,
    );
    if (!free.length) return;
    await this.store
      .release(free)
      .catch((err) => this.log.warn({ vms: free, err: errorMessage(err) }, 'cluster: cannot release'));
  }

  /** A name no VM of the cluster has. */
  private freshName(): string {
    return nextDefaultName([...this.store.vms().keys(), ...this.vms.all().map((r) => r.name)]);
  }
}
