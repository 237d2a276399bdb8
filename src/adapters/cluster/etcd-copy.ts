import type { IKeyValue } from 'etcd3';
import { NO_LOAD, type NodeInfo, type NodeLoad, type NodeView, type VmEntry } from '../../domain/cluster.js';
import type { ClusterChange } from '../../ports/cluster.js';

/**
 * A node's copy of everything the cluster keeps under `prefix` in etcd (docs/cluster.md, "What
 * etcd holds"): read once, then fed by the watch and by single reads (`EtcdClusterStore.look`),
 * each key's value parsed once as it arrives. Reads of a node's view or a VM's entry are by key,
 * so they cost the same at any size. Tells its listeners what a change means: a VM's entry
 * changed, or a node's lease came or went.
 */
export class EtcdCopy {
  /** Every key under the prefix with its value (undefined: not JSON). */
  private readonly kept = new Map<string, unknown>();
  /** The names of the nodes under `members/`: what `nodes()` goes through rather than every key kept. */
  private readonly members = new Set<string>();
  /** The revision of each key's last change the copy holds (a delete's too): an older one is not taken. */
  private readonly revs = new Map<string, number>();
  /** When each deleted key's revision was noted, so the note goes once no read could still be older. */
  private readonly tombs = new Map<string, number>();
  private readonly listeners = new Set<(c: ClusterChange) => void>();

  constructor(private readonly prefix: string) {}

  nodes(): NodeView[] {
    const out: NodeView[] = [];
    for (const node of this.members) {
      const view = this.node(node);
      if (view) out.push(view);
    }
    return out.sort((a, b) => a.node.localeCompare(b.node));
  }

  node(name: string): NodeView | undefined {
    if (!this.members.has(name)) return undefined;
    const member = this.kept.get(this.key(`members/${name}`));
    const live = this.kept.has(this.key(`nodes/${name}`));
    const info = (live ? this.kept.get(this.key(`nodes/${name}`)) : member) as NodeInfo | undefined;
    if (!info) return undefined;
    return {
      ...info,
      state: live ? 'ready' : 'unreachable',
      allocated: (this.kept.get(this.key(`alloc/${name}`)) as NodeLoad | undefined) ?? { ...NO_LOAD },
    };
  }

  vms(): ReadonlyMap<string, VmEntry> {
    const out = new Map<string, VmEntry>();
    const pre = this.key('vms/');
    for (const [key, e] of this.kept) if (key.startsWith(pre) && e) out.set(key.slice(pre.length), e as VmEntry);
    return out;
  }

  vm(name: string): VmEntry | undefined {
    return this.kept.get(this.key(`vms/${name}`)) as VmEntry | undefined;
  }

  watch(listener: (c: ClusterChange) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Takes a key's put (or its delete) into the copy and tells the listeners (unless `quiet`),
   * unless the copy holds that change or a later one already (a single read can bring a key
   * before the watch does).
   */
  keep(kv: IKeyValue, deleted = false, quiet = false): void {
    const key = kv.key.toString();
    const rev = Number(kv.mod_revision);
    if (rev <= (this.revs.get(key) ?? 0)) return;
    this.revs.set(key, rev);
    const was = this.kept.get(key);
    const members = this.key('members/');
    const member = key.startsWith(members) ? key.slice(members.length) : undefined;
    if (member !== undefined) {
      if (deleted) this.members.delete(member);
      else this.members.add(member);
    }
    if (deleted) {
      this.kept.delete(key);
      this.tombs.set(key, Date.now());
    } else {
      this.kept.set(key, parse(kv.value.toString()));
      this.tombs.delete(key);
    }
    if (!quiet) this.changed(key, was);
  }

  /** Forgets the revisions of keys deleted more than `ms` ago: no read answered before their delete is still coming. */
  sweep(ms: number): void {
    for (const [key, at] of this.tombs)
      if (Date.now() - at > ms) {
        this.tombs.delete(key);
        this.revs.delete(key);
      }
  }

  /** Tells the listeners what a key's change means: a VM's entry changed, or a node's lease. */
  private changed(key: string, was: unknown): void {
    if (!this.listeners.size) return;
    let c: ClusterChange | undefined;
    if (key.startsWith(this.key('vms/'))) {
      c = {
        kind: 'vm',
        name: key.slice(this.key('vms/').length),
        entry: this.kept.get(key) as VmEntry | undefined,
        was: was as VmEntry | undefined,
      };
    } else if (key.startsWith(this.key('nodes/'))) {
      // A renewal that says the same is no change of reachability.
      if (was && this.kept.has(key)) return;
      c = { kind: 'node', node: key.slice(this.key('nodes/').length) };
    }
    if (c) for (const l of this.listeners) l(c);
  }

  private key(rest: string): string {
    return this.prefix + rest;
  }
}

/** A value kept in etcd, parsed: undefined when there is none or it is not JSON. */
export function parse<T = unknown>(text: string | undefined): T | undefined {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as T;
  } catch {
    return undefined;
  }
}
