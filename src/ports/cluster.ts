import type { NodeInfo, NodeView, VmEntry, VmShape } from '../domain/cluster.js';
import type { ImageBundle, ImageFetchProgress } from '../domain/image-fetch.js';
import type { MoveOffer } from '../domain/move.js';
import type { Instance } from '../domain/vm.js';
import type { VmFile } from './stores.js';

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
  /** Says what `info()` says now, not at the next renewal; resolves once it is kept (UnavailableError: it is not). */
  announce(): Promise<void>;
  /** Every node that joined, `unreachable` while its lease is gone; with what is placed on each. */
  nodes(): NodeView[];
  /** One node as `nodes()` shows it (what routing a call asks, without going through every key). */
  node(name: string): NodeView | undefined;
  /** Every VM's entry, by name. */
  vms(): ReadonlyMap<string, VmEntry>;
  /** One VM's entry (what routing a call asks, without going through every entry). */
  vm(name: string): VmEntry | undefined;
  /**
   * One VM's entry read from the store itself, taken into the copy: a VM placed through another
   * node a moment ago, which the copy has not followed yet. The copy's while the store is unreachable.
   */
  look(name: string): Promise<VmEntry | undefined>;
  /** True while the copy cannot be kept current (the store unreachable): what it says may be old. */
  readonly stale: boolean;
  /**
   * Places every one of `names` on `node`, each holding `shape` of its capacity, in one
   * transaction (all or none, and nobody sees a part): only while the names are free and nothing
   * else was placed on the node since `check` approved what it saw (tried again when something
   * was). AlreadyExistsError when a name is taken; whatever `check` throws when they no longer fit.
   */
  reserve(names: readonly string[], node: string, shape: VmShape, check: (n: NodeView) => void): Promise<void>;
  /** This node's VM changed: its entry shows `instance` (made, with its shape held, when it had none). */
  publish(instance: Instance): Promise<void>;
  /**
   * The VMs are gone: their entries removed and their shapes given back to their nodes, in one
   * transaction (a failed fork of many gives all its room back at once, not in a race of its own
   * names over the node's room). `owner`: only the entries that are that node's (a node removing
   * its copy of a VM that moved away leaves the entry alone). Idempotent.
   */
  release(names: string | readonly string[], owner?: string): Promise<void>;
  /**
   * This node's VM `name` takes `shape` (an edit, a revert to a snapshot of another shape): its
   * entry and the node's room move by the difference in one transaction, after `check` approved
   * the node without the VM's old shape (tried again when something was placed meanwhile). A VM
   * with no entry (a warm pool member, not placed): nothing. InvalidStateError when the entry is
   * another node's; whatever `check` throws.
   */
  reshape(name: string, shape: VmShape, check: (n: NodeView) => void): Promise<void>;
  /**
   * Hands the VM's entry from node `from` to node `to` with its shape, in one transaction, after
   * `check` approved `to` as it is now (tried again when something was placed meanwhile). Done
   * already (the entry is `to`'s): nothing. InvalidStateError when the entry is another node's;
   * NotFoundError when there is none; whatever `check` throws.
   */
  transfer(name: string, from: string, to: string, check: (n: NodeView) => void): Promise<void>;
  /**
   * Follows changes of VM entries (`entry` undefined: removed; `was` what it held before) and of
   * nodes' leases (a node that became reachable or unreachable). Returns the unsubscribe.
   */
  watch(listener: (change: ClusterChange) => void): () => void;
  /** Gives the lease up (the node is unreachable at once) and stops watching. */
  leave(): Promise<void>;
}

export const PeerNodes = Symbol('PeerNodes');
/** What one node of the cluster asks another directly (not a user's call sent on). */
export interface PeerNodes {
  /**
   * Sends a stopped or suspended VM to `node`: the offer, then its files. Resolves with the VM as
   * the taking node shows it once the cluster says it is that node's; rejects with the taking
   * node's error (a domain error with its message) or UnavailableError when it cannot be reached.
   */
  sendVm(node: NodeView, offer: MoveOffer, files: VmFile[]): Promise<Instance>;
  /**
   * Asks `node` to restore its suspended VM `name` (a running or paused VM's move: POST
   * /vms/{name}/restore there, `paused` a paused one's, whose guest stays paused). Resolves with the
   * VM as it answers it (a `warning` when it cold-booted: it runs then); rejects as sendVm.
   */
  restoreVm(node: NodeView, name: string, options?: { paused?: boolean }): Promise<Instance>;
  /** Asks `node` to pause its running VM `name` (a paused VM's move whose restore there ran it); rejects as sendVm. */
  pauseVm(node: NodeView, name: string): Promise<void>;
  /** What `node` offers of image `image` (unchecked: the caller checks it with checkBundle). */
  imageBundle(node: NodeView, image: string): Promise<unknown>;
  /**
   * Fetches the bundle's files from `node` into `dir`, resuming files a fetch cut off left there.
   * Each file ends at its offered size or this rejects; hashes are the installer's to check.
   */
  fetchImageFiles(node: NodeView, bundle: ImageBundle, dir: string, onBytes?: (bytes: number) => void): Promise<void>;
  /**
   * Asks `node` to fetch image `image` from a node that has it (before a create placed there);
   * `progress` hears how far it is while it fetches.
   */
  fetchImageOn(node: NodeView, image: string, progress?: (p: ImageFetchProgress) => void): Promise<void>;
}
