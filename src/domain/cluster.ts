import { InvalidArgumentError, NotFoundError, ResourceExhaustedError, UnavailableError } from './errors.js';
import type { Instance, VmStatus } from './vm.js';

/**
 * svcd nodes in a cluster on etcd (docs/cluster.md): what a node says of itself in its lease,
 * what a VM's entry holds, and the placement rule. Pure: the etcd adapter stores these shapes, the
 * cluster service decides with them.
 */

/** What a node offers: cpus and memory for VMs, disk for their files, and how many VMs at most. */
export interface NodeCapacity {
  cpus: number;
  memory_mb: number;
  disk_gb: number;
  vm_slots: number;
}

/** What holds a node's capacity: the VMs placed on it (reserved in etcd when placed). */
export interface NodeLoad {
  vms: number;
  cpus: number;
  memory_mb: number;
  disk_gb: number;
}

export const NO_LOAD: NodeLoad = Object.freeze({ vms: 0, cpus: 0, memory_mb: 0, disk_gb: 0 });

/** A node as it says of itself in its lease (renewed every few seconds). */
export interface NodeInfo {
  node: string;
  /** The URL other nodes reach its API at. */
  advertise: string;
  capacity: NodeCapacity;
  /** The images it has built or imported. */
  images: string[];
  hypervisor: string;
  accel?: string;
  tags: Record<string, string>;
  version: string;
  started_at: string;
  /** When it last renewed what it says (its VMs running, its load). */
  seen_at: string;
  /** VMs with a process on it now. */
  running: number;
  /** Drained (POST /nodes/{node}/drain): nothing new is placed on it until the drain is ended. */
  draining?: boolean;
}

export type NodeState = 'ready' | 'unreachable';

/** A node as the cluster sees it: what it said, whether its lease holds, what is placed on it. */
export interface NodeView extends NodeInfo {
  state: NodeState;
  allocated: NodeLoad;
}

/** A VM's entry in the cluster: its node, its reservation, and its Instance as its node last published it. */
export interface VmEntry {
  node: string;
  shape: VmShape;
  instance?: Instance;
}

export interface VmShape {
  cpus: number;
  memory_mb: number;
  disk_gb: number;
}

/** The capacity a VM (its record or its Instance) holds of its node. */
export function shapeOf(v: VmShape): VmShape {
  return { cpus: v.cpus, memory_mb: v.memory_mb, disk_gb: v.disk_gb };
}

export const sameShape = (a: VmShape, b: VmShape) =>
  a.cpus === b.cpus && a.memory_mb === b.memory_mb && a.disk_gb === b.disk_gb;

/** Does `next` need more of any capacity than `was`? */
export const grows = (was: VmShape, next: VmShape) =>
  next.cpus > was.cpus || next.memory_mb > was.memory_mb || next.disk_gb > was.disk_gb;

/** A VM as any node lists it: its node named, `node_unreachable` while that node's lease is gone. */
export type ClusterInstance = Omit<Instance, 'status'> & {
  status: VmStatus | 'node_unreachable';
  node: string;
};

/** Where a create asks to go: a node by name, or nodes whose tags carry every pair given. */
export interface PlacementAsk {
  node?: string;
  node_selector?: Record<string, string>;
}

/** A node's name: lowercase letters, digits and '-', 1 to 63, not starting or ending with '-'. */
export const NODE_NAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

export function assertNodeName(name: unknown, field = 'node'): asserts name is string {
  if (typeof name !== 'string' || !NODE_NAME.test(name))
    throw new InvalidArgumentError(
      `${field} must be a node name (lowercase letters, digits and '-', 1 to 63), got ${JSON.stringify(name)}`,
    );
}

/** The `node` and `node_selector` of a create request, checked; the rest of the request is not looked at. */
export function placementAsk(body: unknown): PlacementAsk {
  const b = (body ?? {}) as Record<string, unknown>;
  const ask: PlacementAsk = {};
  if (b.node !== undefined) {
    assertNodeName(b.node);
    ask.node = b.node;
  }
  if (b.node_selector !== undefined) {
    const sel = b.node_selector;
    if (
      typeof sel !== 'object' ||
      sel === null ||
      Array.isArray(sel) ||
      Object.values(sel).some((v) => typeof v !== 'string')
    )
      throw new InvalidArgumentError('node_selector must be a mapping of tag names to strings');
    ask.node_selector = sel as Record<string, string>;
  }
  return ask;
}

/** Do `count` VMs of `shape` still fit on the node beside what is placed there? */
export function fits(n: Pick<NodeView, 'capacity' | 'allocated'>, shape: VmShape, count = 1): boolean {
  const { capacity: c, allocated: a } = n;
  return (
    a.vms + count <= c.vm_slots &&
    a.cpus + count * shape.cpus <= c.cpus &&
    a.memory_mb + count * shape.memory_mb <= c.memory_mb &&
    a.disk_gb + count * shape.disk_gb <= c.disk_gb
  );
}

/** The check a placement makes of a node as it is now: `count` of `shape` fit beside what is placed there. */
export function roomCheck(shape: VmShape, what: string, count = 1): (n: NodeView) => void {
  return (n) => {
    if (!fits(n, shape, count)) throw new ResourceExhaustedError(`node ${n.node} has no room left for ${what}`);
  };
}

/** How full a node is: the larger share of its cpus and its memory that is placed. */
export function fullness(n: Pick<NodeView, 'capacity' | 'allocated'>): number {
  const share = (used: number, of: number) => (of > 0 ? used / of : 1);
  return Math.max(share(n.allocated.cpus, n.capacity.cpus), share(n.allocated.memory_mb, n.capacity.memory_mb));
}

/**
 * The placement rule (docs/cluster.md): among ready nodes (the one named, or those whose tags
 * match the selector) those the VM fits on beside what is placed there, and that have its image or
 * can build it (`buildable`: the built-in images every node builds); of them the least full, then
 * the one with fewer VMs, then by name. Throws NotFound for a node that does not exist,
 * Unavailable for one that is unreachable, ResourceExhausted when none fits.
 */
export function placeVm(
  nodes: readonly NodeView[],
  shape: VmShape & { image: string },
  ask: PlacementAsk,
  buildable: (image: string) => boolean,
): NodeView {
  let pool = nodes;
  if (ask.node !== undefined) {
    const n = nodes.find((x) => x.node === ask.node);
    if (!n) throw new NotFoundError(`no node ${ask.node} in the cluster (svc nodes lists them)`);
    if (n.state !== 'ready') throw new UnavailableError(`node ${n.node} is unreachable: its lease is gone`);
    if (n.draining)
      throw new ResourceExhaustedError(
        `node ${n.node} is drained: nothing new is placed on it (DELETE /nodes/${n.node}/drain ends that)`,
      );
    pool = [n];
  }
  const sel = Object.entries(ask.node_selector ?? {});
  pool = pool.filter((n) => n.state === 'ready' && !n.draining && sel.every(([k, v]) => n.tags[k] === v));
  if (!pool.length)
    throw new ResourceExhaustedError(
      sel.length
        ? `no ready node has the tags ${sel.map(([k, v]) => `${k}=${v}`).join(', ')}`
        : 'no node of the cluster is ready',
    );
  const withImage = pool.filter((n) => buildable(shape.image) || n.images.includes(shape.image));
  if (!withImage.length) throw new NotFoundError(`no ready node has the image ${shape.image}`);
  const fitting = withImage.filter((n) => fits(n, shape));
  if (!fitting.length)
    throw new ResourceExhaustedError(
      `no node has room for ${shape.cpus} cpus, ${shape.memory_mb} MiB and ${shape.disk_gb} GiB` +
        (ask.node ? ` (node ${ask.node} is full)` : ` (${withImage.length} node(s) with the image, all full)`),
    );
  return [...fitting].sort(
    (a, b) => fullness(a) - fullness(b) || a.allocated.vms - b.allocated.vms || a.node.localeCompare(b.node),
  )[0];
}

/** A load with `count` VMs of `shape` added (a negative count: taken away), never below zero. */
export function addLoad(load: NodeLoad, shape: VmShape, count: number): NodeLoad {
  const clamp = (x: number) => Math.max(0, x);
  return {
    vms: clamp(load.vms + count),
    cpus: clamp(load.cpus + count * shape.cpus),
    memory_mb: clamp(load.memory_mb + count * shape.memory_mb),
    disk_gb: clamp(load.disk_gb + count * shape.disk_gb),
  };
}
