import { inject, injectable } from 'inversify';
import { placeVm, roomCheck, shapeOf, type ClusterInstance, type NodeView } from '../domain/cluster.js';
import { errorMessage, InvalidArgumentError, InvalidStateError } from '../domain/errors.js';
import { assertMovable, offeredRecord, parseMoveRequest, type DrainResult, type MoveOffer } from '../domain/move.js';
import { toPublic, type Instance, type VmRecord } from '../domain/vm.js';
import { PeerNodes } from '../ports/cluster.js';
import { Hypervisor, VmDisks } from '../ports/hypervisor.js';
import { GuestImages } from '../ports/guest-images.js';
import { Logger } from '../ports/logger.js';
import { VmStore } from '../ports/stores.js';
import { Activity } from './activity.js';
import type { Config } from './config.js';
import { AppConfig } from './tokens.js';
import { ClusterService } from './cluster-service.js';
import { ImageFetchService } from './image-fetch-service.js';
import { VmKeeper } from './vm-keeper.js';
import { VmLifecycle } from './vm-lifecycle.js';
import { Vms } from './vms.js';

/**
 * Moving VMs between the nodes of a cluster (docs/cluster.md, "Moving a VM"). The node that has a
 * stopped or suspended VM sends its record and files to the node asked for; that node takes them
 * in whole, makes its disk stand on its own copy of the image (the digests agree), and then makes
 * the VM its own in etcd, the one step that decides. Then the sender forgets its copy. A running
 * VM is suspended for its move and restored there (here again when the move fails). Each side
 * marks its record first (`leaving`, `arriving`), so a daemon that dies between two steps asks
 * etcd at its next start who has the VM and keeps or drops its copy by that: nothing is lost and
 * nothing is left twice.
 */
@injectable()
export class MoveService {
  constructor(
    @inject(ClusterService) private readonly cluster: ClusterService,
    @inject(PeerNodes) private readonly peers: PeerNodes,
    @inject(ImageFetchService) private readonly fetches: ImageFetchService,
    @inject(Vms) private readonly vms: Vms,
    @inject(VmLifecycle) private readonly lifecycle: VmLifecycle,
    @inject(VmKeeper) private readonly keeper: VmKeeper,
    @inject(VmStore) private readonly store: VmStore,
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(VmDisks) private readonly disks: VmDisks,
    @inject(GuestImages) private readonly images: GuestImages,
    @inject(Activity) private readonly activity: Activity,
    @inject(AppConfig) private readonly config: Config,
    @inject(Logger) private readonly log: Logger,
  ) {}

  /**
   * `POST /vms/{name}/move` on the node that has the VM: sends it to `node` (without one, to the
   * node the placement rule picks among the others, as a drain does), answers it as it is there.
   */
  async move(name: string, body: unknown): Promise<ClusterInstance> {
    return this.moveTo(name, parseMoveRequest(body).node);
  }

  /**
   * One move, in the activity log, to `node` or (without one) to the node the placement rule picks
   * among the others once the VM is known to be movable: a stopped or suspended VM is carried under
   * its lock. A running or paused one is checked first, then suspended, carried and restored there
   * (a paused one restored paused: its guest does not run there until it is resumed; paused after
   * its restore when that cold-booted it); a move that fails after the suspend puts it back here as
   * it was. When it moved but did not restore (or pause) there, the answer is the VM as it is there
   * with a `warning` saying why (the move happened: a caller finishes it).
   */
  private async moveTo(name: string, asked?: string): Promise<ClusterInstance> {
    const rec = this.vms.get(name);
    if (asked === undefined) assertMovable(rec, { running: true });
    const node = asked ?? this.pick(rec).node;
    const carry = () => this.activity.timed('move', name, () => this.vms.withVm(name, (r) => this.send(r, node)));
    const target = this.checkSend(rec, node, { running: true });
    if (rec.status !== 'running' && rec.status !== 'paused') return carry();
    const paused = rec.status === 'paused';
    await this.lifecycle.suspend(name, { forMove: true });
    let moved: ClusterInstance;
    try {
      moved = await carry();
    } catch (err) {
      await this.putBack(name, paused, err);
      throw err;
    }
    let restored: ClusterInstance;
    try {
      restored = { ...(await this.peers.restoreVm(target, name, { paused })), node };
    } catch (err) {
      const warning = `moved to node ${node} but not restored there: ${errorMessage(err)}; it is suspended there (restore it)`;
      this.log.warn({ vm: name, node, err: errorMessage(err) }, 'move: the vm moved but did not restore there');
      return { ...moved, warning };
    }
    if (!paused || restored.status === 'paused') return restored;
    try {
      await this.peers.pauseVm(target, name);
      return { ...restored, status: 'paused' };
    } catch (err) {
      const warning = `moved to node ${node} and restored there, but not paused again: ${errorMessage(err)}; it runs there`;
      this.log.warn({ vm: name, node, err: errorMessage(err) }, 'move: the vm moved but was not paused there');
      return { ...restored, warning: restored.warning ? `${restored.warning}; ${warning}` : warning };
    }
  }

  /** A move that failed after its VM was suspended: restored here (paused, if it was); `err` says where it is when not. */
  private async putBack(name: string, paused: boolean, err: unknown): Promise<void> {
    // The caller hears where its VM is when it is not as it was.
    const tell = (where: string, why: string, e: unknown) => {
      this.log.warn({ vm: name, err: errorMessage(e) }, `move: not moved, and it ${where}`);
      if (err instanceof Error) err.message += `; vm ${name} ${where} (${why}: ${errorMessage(e)})`;
    };
    let back: Instance;
    try {
      back = await this.lifecycle.restore(name, { paused });
    } catch (e) {
      return tell('stays here suspended', 'its restore failed', e);
    }
    if (paused && back.status !== 'paused')
      await this.lifecycle.pause(name).catch((e: unknown) => tell('runs here', 'its pause failed', e));
  }

  /**
   * `POST /nodes/{node}/drain` on that node: every VM that can move goes to the node the placement
   * rule picks among the others (a running or paused one suspended for its move and restored there); what
   * cannot is refused, saying why. One VM at a time.
   */
  async drain(): Promise<DrainResult> {
    const out: DrainResult = { node: this.cluster.self, moved: [], refused: [] };
    // Warm pool members are the pool's (hidden as in GET /vms), not the node's VMs to move.
    const mine = this.vms.all().filter((r) => !r.pool);
    for (const rec of mine.sort((a, b) => a.name.localeCompare(b.name))) {
      try {
        const moved = await this.moveTo(rec.name);
        out.moved.push({ name: rec.name, node: moved.node, ...(moved.warning ? { warning: moved.warning } : {}) });
      } catch (err) {
        out.refused.push({ name: rec.name, reason: errorMessage(err) });
      }
    }
    return out;
  }

  /** Where a drained VM (or one moved without a node) goes: the placement rule over the ready nodes but this one. */
  private pick(rec: VmRecord): NodeView {
    const others = this.cluster.nodes().filter((n) => n.node !== this.cluster.self);
    return placeVm(
      others,
      { cpus: rec.cpus, memory_mb: rec.memory_mb, disk_gb: rec.disk_gb, image: rec.image },
      {},
      () => false,
    );
  }

  /** Throws when `rec` cannot go to `node` (as it is, or running with `running`), or has no room there; else that node. */
  private checkSend(rec: VmRecord, node: string, o: { running?: boolean } = {}): NodeView {
    assertMovable(rec, o);
    if (this.config.warm_pool.size > 0 && rec.name === this.config.warm_pool.template)
      throw new InvalidStateError(
        `vm ${rec.name} is the template of node ${this.cluster.self}'s warm pool (warm_pool.template); it stays`,
      );
    if (node === this.cluster.self) throw new InvalidArgumentError(`vm ${rec.name} is on node ${node} already`);
    const target = this.cluster.node(node);
    if (target.state !== 'ready') throw new InvalidStateError(`node ${node} is unreachable: its lease is gone`);
    // As the cluster saw it last: the hand-over checks again, but a full node is told before
    // anything is carried (or a running VM suspended).
    roomCheck(shapeOf(rec), `vm ${rec.name}`)(target);
    return target;
  }

  private async send(rec: VmRecord, node: string): Promise<ClusterInstance> {
    const target = this.checkSend(rec, node);
    const offer: MoveOffer = {
      from: this.cluster.self,
      record: { ...rec },
      // of the build its disk stands on: one the image was built anew since is on no other node
      image_digest: await this.images.digest(rec.image, this.keeper.ref(rec)),
      // A saved guest loads only where the same hypervisor runs: the VM's own, or a snapshot's.
      state_key: savesGuest(rec) ? await this.hv.savedStateKey?.() : undefined,
    };
    const files = await this.store.files(rec.name);
    rec.leaving = node;
    await this.vms.save(rec);
    let moved: ClusterInstance | undefined;
    try {
      moved = { ...(await this.peers.sendVm(target, offerOf(offer), files)), node } as ClusterInstance;
    } catch (err) {
      // The answer may be what was lost: what etcd says decides.
      if (this.cluster.ownerOf(rec.name) !== node) {
        delete rec.leaving;
        await this.vms.save(rec);
        throw err;
      }
      this.log.warn({ vm: rec.name, node, err: errorMessage(err) }, 'move: the answer was lost, but the vm is there');
    }
    await this.forget(rec);
    this.log.info({ vm: rec.name, node, files: files.length }, 'vm moved');
    return moved ?? { ...toPublic(rec), node };
  }

  /**
   * The node a VM is sent to: takes in the offer and the files `fill` writes, checks that its disk
   * stands on the same image here and a saved state loads here, then makes it its own in etcd.
   * AlreadyExistsError when the name is here; InvalidStateError when the cluster says another node
   * has it, or what it stands on differs here.
   */
  async receive(raw: unknown, fill: (dir: string) => Promise<void>): Promise<ClusterInstance> {
    const offer = offeredRecord(raw);
    const rec = offer.record;
    const name = rec.name;
    return this.vms.locked(name, async () => {
      this.vms.checkRoom(1, 0, 0);
      if (this.vms.find(name)) throw new InvalidStateError(`vm ${name} already exists on node ${this.cluster.self}`);
      const owner = this.cluster.ownerOf(name);
      if (owner !== offer.from)
        throw new InvalidStateError(`the cluster says vm ${name} is on node ${owner ?? '(none)'}, not ${offer.from}`);
      assertMovable(rec);
      // An image this node lacks is fetched first, from a node that has it.
      await this.fetches.ensureHere(rec.image).catch(() => undefined);
      const here = await this.images.digest(rec.image).catch(() => undefined);
      if (here !== offer.image_digest)
        throw new InvalidStateError(
          here
            ? `image ${rec.image} on node ${this.cluster.self} is not the one vm ${name} was made of (digest ${here}, not ${offer.image_digest})`
            : `node ${this.cluster.self} has no image ${rec.image}, and no node it can fetch it from`,
        );
      if (offer.state_key !== undefined && offer.state_key !== (await this.hv.savedStateKey?.()))
        throw new InvalidStateError(
          `vm ${name} ${rec.status === 'suspended' ? 'was suspended' : 'has snapshots with memory saved'} by a hypervisor that node ${this.cluster.self} does not match (another QEMU, machine or accelerator); ${rec.status === 'suspended' ? 'shut it down' : 'delete them'} to move it`,
        );
      const kept: VmRecord = { ...rec, arriving: offer.from, updated_at: new Date().toISOString() };
      await this.store.receive(kept, fill);
      try {
        await this.disks.takeIn(await this.keeper.spec(kept, kept.forwards), kept.status === 'suspended');
        await this.cluster.takeOver(name, offer.from);
      } catch (err) {
        await this.hv.destroy(this.keeper.ref(kept)).catch(() => undefined);
        await this.store.remove(name);
        throw err;
      }
      // From here the VM is this node's: a failure to record that is settled at the next start.
      this.vms.admit(kept);
      delete kept.arriving;
      await this.vms.save(kept);
      return { ...toPublic(kept), node: this.cluster.self };
    });
  }

  /**
   * After a restart (with the cluster joined): a VM a move had marked here is kept or dropped by
   * what etcd says. Nothing is done while etcd cannot be read (it is asked again at the next start).
   */
  async settle(): Promise<void> {
    if (this.cluster.stale) return;
    for (const rec of this.vms.all()) {
      const mark = rec.leaving ?? rec.arriving;
      if (mark === undefined) continue;
      const owner = this.cluster.ownerOf(rec.name);
      const ours = rec.leaving !== undefined ? owner !== rec.leaving : owner === this.cluster.self;
      this.log.warn({ vm: rec.name, owner, kept: ours }, 'move: finishing a move a daemon stop cut off');
      await this.vms.withVm(rec.name, async (r) => {
        if (ours) {
          delete r.leaving;
          delete r.arriving;
          await this.vms.save(r);
        } else await this.forget(r);
      });
    }
  }

  /** The copy of a VM that is now another node's goes from here (its entry in etcd is that node's). */
  private async forget(rec: VmRecord): Promise<void> {
    rec.deleting = true; // not saved: `leaving` or `arriving` already says what a restart does
    await this.keeper.purge(rec);
  }
}

/** Does the VM hold a saved guest: suspended, or a snapshot with its memory? */
function savesGuest(rec: VmRecord): boolean {
  return rec.status === 'suspended' || !!rec.snapshots?.some((s) => s.memory);
}

/** The offer as it is sent: the record without what only this node's hypervisor reads. */
function offerOf(o: MoveOffer): MoveOffer {
  const { runtime: _r, leaving: _l, arriving: _a, deleting: _d, ...record } = o.record;
  return { ...o, record: record as VmRecord };
}
