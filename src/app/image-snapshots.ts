import { createHash } from 'node:crypto';
import { inject, injectable } from 'inversify';
import { defaultDiskGb, defaultMemoryMb, type CreateRequest } from '../domain/create-request.js';
import { bootEntrypoint } from '../domain/processes.js';
import { entrypointWord } from '../domain/restart-policy.js';
import { errorMessage, InternalError } from '../domain/errors.js';
import { RESERVED_VM_PREFIX } from '../domain/names.js';
import { Clock } from '../ports/clock.js';
import { GuestAgent } from '../ports/guest-agent.js';
import type { VmHandle, VmRef, VmSpec } from '../ports/hypervisor.js';
import type { ImageInfo } from '../ports/guest-images.js';
import { Hypervisor, VmDisks } from '../ports/hypervisor.js';
import { GuestImages } from '../ports/guest-images.js';
import { GuestShares } from './guest-shares.js';
import { Logger } from '../ports/logger.js';
import { SnapshotStore, type ImageSnapshotRecord } from '../ports/stores.js';
import { SshKeys } from '../ports/tunnels.js';
import type { Config } from './config.js';
import { KeyedMutex } from './keyed-mutex.js';
import { agentEndpoint } from './readiness.js';
import { entrypointSaid, sameShape, shapeFor, type Shape } from './snapshot-shape.js';
import { AppConfig } from './tokens.js';

/** What a create starts from: a snapshot to restore a copy of, or why it boots instead. */
export type SnapshotChoice =
  | { snapshot: ImageSnapshotRecord; ref: VmRef }
  | { reason: string; /** Make one after this create: it may serve the next. */ capture: boolean };

/** A boot that takes longer than this is given up (the capture is tried again later). */
const CAPTURE_TIMEOUT_MS = 10 * 60_000;
/** After a failed capture, the same key is not tried again for this long. */
const RETRY_AFTER_MS = 10 * 60_000;

/**
 * Image snapshots (docs/snapshot-creates.md): for an image with an agent and a machine shape, a
 * guest booted once and suspended, which creates of that image and shape restore copies of (as a
 * clone restores its template's): each copy its own disk on the snapshot's layers, grown to its
 * size, and its own identity. A shape is captured in the background after its first cold boot;
 * a snapshot is keyed by everything that makes its guest (the image's build, the shape, the
 * daemon's SSH key, the hypervisor's key), so a changed input is never restored: it is captured
 * again. One capture runs at a time, at background priority.
 */
@injectable()
export class ImageSnapshots {
  private readonly known = new Map<string, ImageSnapshotRecord>();
  private readonly capturing = new Map<string, { image: string; done: Promise<void> }>();
  private readonly failedAt = new Map<string, number>();
  private readonly locks = new KeyedMutex();
  private queue: Promise<void> = Promise.resolve();
  private stopped = false;
  /** Captures called off (their image is being deleted), until they have ended. */
  private readonly calledOff = new Set<string>();
  /** The capture under way. */
  private current: { key: string; image: string } | undefined;

  constructor(
    @inject(AppConfig) private readonly config: Config,
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(VmDisks) private readonly disks: VmDisks,
    @inject(GuestImages) private readonly images: GuestImages,
    @inject(GuestShares) private readonly shares: GuestShares,
    @inject(GuestAgent) private readonly agent: GuestAgent,
    @inject(SnapshotStore) private readonly store: SnapshotStore,
    @inject(SshKeys) private readonly keys: SshKeys,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
  ) {}

  /**
   * Loads the snapshots a previous daemon made: an unfinished one (its daemon stopped mid-capture)
   * goes, with its guest; one whose inputs changed since (a rebuilt image, another QEMU), or whose
   * disk no longer opens (its disk names its image's file by path, and the images folder moved
   * where the same build cannot be found), goes, and its image and shape are captured again in the
   * background. One whose image's file moved with the folder stands on it there and stays. What a
   * daemon killed with a snapshot in use left running (the QEMUs it started ahead for the
   * snapshot's next copies) is stopped.
   */
  async init(): Promise<void> {
    for (const key of await this.store.unfinished()) await this.discard(key);
    const stale: { rec: ImageSnapshotRecord; why: string }[] = [];
    for (const rec of await this.store.list()) {
      const image = await this.images.resolveImage(rec.image).catch(() => undefined);
      const now = image?.built ? await this.keyOf(image, rec).catch(() => undefined) : undefined;
      const fault = now === rec.key ? await this.faultOf(rec) : undefined;
      if (now !== rec.key || fault) {
        const why = fault
          ? `its disk does not open: ${fault}`
          : image?.built
            ? "it was made of other inputs (the image's build, the disk size, the SSH key or the hypervisor)"
            : `image ${rec.image} is gone or not built`;
        stale.push({ rec, why });
        continue;
      }
      this.known.set(rec.key, rec);
      await this.hv
        .kill(this.refOf(rec.key))
        .catch((err: Error) => this.log.warn({ key: rec.key, err: err.message }, 'cannot stop what a snapshot left'));
    }
    for (const { rec, why } of stale) {
      await this.discard(rec.key);
      this.log.info({ image: rec.image, cpus: rec.cpus, memory_mb: rec.memory_mb, why }, 'image snapshot is stale');
      void this.prepareImage(rec.image, rec);
    }
  }

  /**
   * `prepare` for an image by name, as it is built now (after a build, or a create that built it),
   * in `shape` or in the shape of a create that names none; an image that went meanwhile has
   * nothing to capture. Never rejects.
   */
  async prepareImage(id: string, shape: Shape | 'default'): Promise<void> {
    const image = await this.images.resolveImage(id).catch(() => undefined);
    if (image) await this.prepare(image, shape === 'default' ? this.defaultShape(image) : shape);
  }

  /** The shape of a create of `image` that names none: config `cpus`, and its memory (defaultMemoryMb). */
  private defaultShape(image: ImageInfo): Shape {
    return { cpus: this.config.cpus, memory_mb: defaultMemoryMb(this.config.memory_mb, image) };
  }

  /**
   * The daemon is stopping: no more captures start, and the one under way is called off and has
   * ended, its guest killed and its files removed, when this resolves (a guest left running would
   * belong to no daemon until the next start; files written after would race the caller's cleanup).
   */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.current) await this.callOff(this.current.key);
    await this.queue.catch(() => undefined);
  }

  /** The snapshots of an image (GET /images/{id}). */
  of(image: string): ImageSnapshotRecord[] {
    return [...this.known.values()].filter((r) => r.image === image);
  }

  /**
   * What a create of `image` in `shape` starts from. Undefined when snapshot creates are off.
   * A reason is the create's to show: the fields that make a guest a restore cannot give it
   * (mounts where the hypervisor adds them only at boot; the overlay network: a NIC of its own)
   * boot it.
   */
  async choose(
    req: Pick<CreateRequest, 'mounts'>,
    image: ImageInfo,
    anyShape: Shape,
    diskGb: number,
  ): Promise<SnapshotChoice | undefined> {
    const shape = shapeFor(image, anyShape);
    if (!this.config.create_from_snapshot) return undefined;
    const boot = (reason: string, capture = false): SnapshotChoice => ({ reason, capture });
    if (!this.hv.savedStateKey) return boot(`the ${this.hv.kind} hypervisor cannot restore a snapshot into a new vm`);
    if (!image.agent_ready) return boot(`image ${image.id} has no svc-agent to give a restored copy its identity`);
    if (!this.shares.restorable(req)) return boot('host folders are attached when a guest boots');
    if (this.config.network === 'overlay') return boot('on the overlay network each guest gets its NIC at boot');
    if (diskGb < this.diskOf(image))
      return boot(`its ${diskGb} GB disk is smaller than the snapshots' (${this.diskOf(image)} GB: config disk_gb)`);
    const what = `image ${image.id} with ${shape.cpus} cpu(s) and ${shape.memory_mb} MB${entrypointSaid(shape.entrypoint)}`;
    if (!image.built) return boot(`image ${image.id} is built first; a snapshot is made after this vm boots`, true);
    const key = await this.keyOf(image, shape);
    const snap = this.known.get(key);
    if (snap) return { snapshot: snap, ref: this.refOf(key) };
    if (this.capturing.has(key)) return boot(`the snapshot of ${what} is being made`);
    return boot(`no snapshot of ${what} yet: one is made after this vm boots`, true);
  }

  /**
   * Runs `fn` while snapshot `key` cannot go (a copy is taken from it). When `fn` fails, the
   * snapshot goes (its files may be what failed: a layer or the image its disk stands on gone), so
   * the next create of its shape boots and a new one is made after it; the error says so.
   */
  using<T>(key: string, fn: () => Promise<T>): Promise<T> {
    return this.locks.run(key, async () => {
      const rec = this.known.get(key);
      if (!rec) throw new InternalError('the image snapshot was removed meanwhile');
      try {
        return await fn();
      } catch (err) {
        await this.discard(key);
        this.log.warn(
          { image: rec.image, cpus: rec.cpus, memory_mb: rec.memory_mb, err: errorMessage(err) },
          'image snapshot dropped: a copy of it failed',
        );
        throw new InternalError(
          `${errorMessage(err)} (the snapshot of image ${rec.image} is dropped: the next create of this shape boots, and a new one is made after it)`,
        );
      }
    });
  }

  /**
   * Captures `image` in `shape` in the background unless it is done, under way or failed lately.
   * Resolves when that capture ends (tests, benchmarks); it never rejects.
   */
  async prepare(image: ImageInfo, anyShape: Shape): Promise<void> {
    const shape = shapeFor(image, anyShape);
    if (!this.config.create_from_snapshot || !this.hv.savedStateKey || !image.built || !image.agent_ready) return;
    let key: string;
    try {
      key = await this.keyOf(image, shape);
    } catch (err) {
      this.log.warn({ image: image.id, err: errorMessage(err) }, 'cannot key an image snapshot; creates boot');
      return;
    }
    const last = this.failedAt.get(key);
    if (this.known.has(key) || this.stopped || (last !== undefined && this.clock.now() - last < RETRY_AFTER_MS)) return;
    let run = this.capturing.get(key);
    if (!run) {
      const done = this.queue.then(() => this.capture(image, shape, key));
      this.queue = done;
      run = { image: image.id, done };
      this.capturing.set(key, run);
      void done.finally(() => {
        this.capturing.delete(key);
        this.calledOff.delete(key);
      });
    }
    return run.done;
  }

  /** Removes an image's snapshots (the image is being deleted), a capture of it under way or queued too. */
  async removeImage(image: string): Promise<void> {
    // A queued one returns when its turn comes.
    for (const [key, run] of [...this.capturing]) if (run.image === image) this.calledOff.add(key);
    if (this.current?.image === image) await this.callOff(this.current.key);
    for (const rec of this.of(image)) await this.locks.run(rec.key, () => this.discard(rec.key));
  }

  /** Why a snapshot's disk does not open, once it stands on its image again if the image's file moved. */
  private async faultOf(rec: ImageSnapshotRecord): Promise<string | undefined> {
    const ref = this.refOf(rec.key);
    const refused = await this.disks.restand?.(ref, rec.image).then(
      () => undefined,
      (err: Error) => err.message,
    );
    return refused ?? (await this.disks.diskFault?.(ref));
  }

  private refOf(key: string): VmRef {
    return { name: `${RESERVED_VM_PREFIX}${key.slice(0, 12)}`, dir: this.store.dir(key) };
  }

  /**
   * The disk a snapshot's guest boots with: a create's default (defaultDiskGb), so a create of the
   * default size restores with nothing to grow; a larger one grows.
   */
  private diskOf(image: ImageInfo): number {
    return defaultDiskGb(this.config.disk_gb, image);
  }

  /** The key of a snapshot of `image` in `shape` made now: a digest of every input of its guest. */
  private async keyOf(image: ImageInfo, shape: Shape): Promise<string> {
    const { entrypoint } = shapeFor(image, shape);
    const inputs = [
      image.id,
      image.revision ?? '',
      this.diskOf(image),
      shape.cpus,
      shape.memory_mb,
      await this.keys.publicKey(),
      (await this.hv.savedStateKey?.()) ?? '',
      // Only when set, so the keys of snapshots made before it was a choice stay as they were.
      ...(entrypoint !== undefined ? [entrypointWord(entrypoint)] : []),
    ];
    return createHash('sha256').update(JSON.stringify(inputs)).digest('hex').slice(0, 24);
  }

  /** Boots the image on the snapshots' disk, waits for its boot to end, suspends it and records it. */
  private async capture(image: ImageInfo, shape: Shape, key: string): Promise<void> {
    if (this.halted(key)) return;
    const t0 = this.clock.now();
    const ref = this.refOf(key);
    this.current = { key, image: image.id };
    try {
      const dir = await this.store.begin(key);
      const spec: VmSpec = {
        name: ref.name,
        dir,
        cpus: shape.cpus,
        memory_mb: shape.memory_mb,
        disk_gb: this.diskOf(image),
        image: image.id,
        hostname: 'svc-snapshot',
        forwards: [],
        mounts: [],
        ssh_authorized_key: await this.keys.publicKey(),
        entrypoint: bootEntrypoint(image.entrypoint, shape.entrypoint),
      };
      await this.disks.provision(spec);
      this.goOn(key);
      const handle = await this.hv.launch(spec, { background: true });
      await this.settled(handle, t0, key);
      const { snapshot } = await this.hv.suspend(ref);
      if (!snapshot) throw new InternalError('the hypervisor wrote no saved state');
      this.goOn(key);
      const rec = await this.store.commit({
        key,
        image: image.id,
        revision: image.revision ?? '',
        ...shape,
        disk_gb: this.diskOf(image),
        created_at: new Date(this.clock.now()).toISOString(),
        capture_ms: this.clock.now() - t0,
      });
      this.known.set(key, rec);
      // What it replaces (the same image and shape, made of other inputs) is never used again.
      for (const old of [...this.known.values()])
        if (old.key !== key && old.image === rec.image && sameShape(old, rec))
          await this.locks.run(old.key, () => this.discard(old.key));
      this.log.info(
        { image: image.id, ...shape, capture_ms: rec.capture_ms, size_bytes: rec.size_bytes },
        'image snapshot made',
      );
    } catch (err) {
      if (this.halted(key)) this.log.info({ image: image.id, ...shape }, 'image snapshot called off');
      else {
        this.failedAt.set(key, this.clock.now());
        this.log.warn(
          { image: image.id, ...shape, err: errorMessage(err) },
          `image snapshot failed; creates of this shape boot, and it is tried again in ${RETRY_AFTER_MS / 60_000} min`,
        );
      }
      await this.discard(key);
    } finally {
      this.current = undefined;
    }
  }

  /**
   * Waits until the guest has booted all the way: its agent answers and its boot's last step (the
   * userdata service, which runs nothing here) has marked its end.
   */
  private async settled(handle: VmHandle, t0: number, key: string): Promise<void> {
    const endpoint = agentEndpoint(handle);
    for (;;) {
      this.goOn(key);
      if (this.clock.now() - t0 > CAPTURE_TIMEOUT_MS) throw new InternalError('the guest did not boot in time');
      const health = await this.agent.health(endpoint, 2000).catch(() => undefined);
      if (health?.userdata_ran) return;
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  /** The daemon is stopping or the capture's image is being deleted. */
  private halted(key: string): boolean {
    return this.stopped || this.calledOff.has(key);
  }

  private goOn(key: string): void {
    if (this.halted(key)) throw new InternalError('the capture was called off');
  }

  /**
   * Ends the capture under way: its guest is killed (a boot or a suspend it waits on fails at
   * once) and it removes what it made. Resolves when it has.
   */
  private async callOff(key: string): Promise<void> {
    this.calledOff.add(key);
    await this.hv.destroy(this.refOf(key)).catch(() => undefined);
    await this.capturing.get(key)?.done;
  }

  private async discard(key: string): Promise<void> {
    this.known.delete(key);
    const ref = this.refOf(key);
    await this.hv
      .destroy(ref)
      .catch((err: Error) => this.log.warn({ key, err: err.message }, 'cannot destroy a snapshot'));
    await this.store.remove(key);
  }
}
