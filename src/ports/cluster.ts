import type { NodeInfo, NodeView, VmEntry, VmShape } from '../domain/cluster.js';
import type { Instance } from '../domain/vm.js';

export const ClusterStore = Symbol('ClusterStore');

export type ClusterChange =
  { kind: 'vm'; name: string; entry?: VmEntry; was?: VmEntry } | { kind: 'node'; node: string };

/**
 * The cluster's shared state (docs/cluster.md), kept in etcd: the nodes' leases, what is placed on
 * each node, and every VM's entry. Reads come from a copy the store keeps current by watching;
 * writes are transactions. Every write throws UnavailableError when the store cannot be reached
 * (or has no quorum), naming why.
 */
export interface ClusterStore {
  /** Joins as `self`: keeps what `info()` says in a lease renewed every few seconds until `leave`. */
  join(info: () => Promise<NodeInfo>): Promise<void>;
  /** Every node that joined, `unreachable` while its lease is gone; with what is placed on each. */
  nodes(): NodeView[];
  /** Every VM's entry, by name. */
  vms(): ReadonlyMap<string, VmEntry>;
  /** One VM's entry (what routing a call asks, without going through every entry). */
  vm(name: string): VmEntry | undefined;
  /** True while the copy cannot be kept current (the store unreachable): what it says may be old. */
  readonly stale: boolean;
  /**
   * Places `name` on `node`, holding `shape` of its capacity, in one transaction: only while the
   * name is free and nothing else was placed on the node since `check` approved what it saw
   * (tried again when something was). AlreadyExistsError when the name is taken; whatever `check`
   * throws when the VM no longer fits.
   */
  reserve(name: string, node: string, shape: VmShape, check: (n: NodeView) => void): Promise<void>;
  /** This node's VM changed: its entry shows `instance` (made, with its shape held, when it had none). */
  publish(instance: Instance): Promise<void>;
  /** The VM is gone: its entry removed and its shape given back to its node. Idempotent. */
  release(name: string): Promise<void>;
  /**
   * Follows changes of VM entries (`entry` undefined: removed; `was` what it held before) and of
   * nodes' leases (a node that became reachable or unreachable). Returns the unsubscribe.
   */
  watch(listener: (change: ClusterChange) => void): () => void;
  /** Gives the lease up (the node is unreachable at once) and stops watching. */
  leave(): Promise<void>;
}
