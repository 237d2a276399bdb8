import { inject, injectable } from 'inversify';
import { AlreadyExistsError } from '../domain/errors.js';
import type { VmRecord } from '../domain/vm.js';
import { assertImageId, parseRegistryResolve } from '../domain/image-request.js';
import type { ImageDetails } from '../ports/guest-images.js';
import { GuestImages } from '../ports/guest-images.js';
import { Logger } from '../ports/logger.js';
import { errorMessage } from '../domain/errors.js';
import { Activity } from './activity.js';
import type { Config } from './config.js';
import { AppConfig } from './tokens.js';
import { ImageSnapshots } from './image-snapshots.js';
import { VmKeeper } from './vm-keeper.js';
import { Vms } from './vms.js';

/** GET/DELETE /images: the built images, what stands on each, and removing one nothing uses. */
@injectable()
export class ImageService {
  constructor(
    @inject(GuestImages) private readonly images: GuestImages,
    @inject(Vms) private readonly vms: Vms,
    @inject(Activity) private readonly activity: Activity,
    @inject(AppConfig) private readonly config: Config,
    @inject(Logger) private readonly log: Logger,
    @inject(ImageSnapshots) private readonly snapshots: ImageSnapshots,
    @inject(VmKeeper) private readonly keeper: VmKeeper,
  ) {}

  /** Images being built anew now (refreshOutdated), so that two refreshes start one build. */
  private readonly rebuilding = new Set<string>();

  /**
   * On a daemon's first start the default image is not built yet: it is built now, in the
   * background (config `build_default_image`), so the first `svc new` does not wait a minute or
   * two for it; a create that comes meanwhile joins the same build, with its progress. Returns the
   * build under way (undefined when there is nothing to build); a failure is logged, and the first
   * create tries again.
   */
  async prebuildDefault(): Promise<{ done: Promise<void> } | undefined> {
    if (!this.config.build_default_image) return undefined;
    const image = await this.images.resolveImage(this.config.image).catch(() => undefined);
    if (!image || image.built) return undefined;
    this.log.info({ image: image.id }, 'building the default image in the background (first start)');
    return {
      done: this.afterBuild(image.id, this.images.ensureImage(image.id), {
        built: 'the default image is built',
        failed: 'the default image did not build; the first create tries again',
      }),
    };
  }

  /**
   * After an upgrade of svc, the built-in images built by the svc before it run the agent of then
   * (`outdated`): each is built again now in the background (config `build_default_image`), its
   * snapshots dropped; creates of it meanwhile wait for the new one, as for a first build. VMs
   * that stand on the old build keep it (their disks and kernel) until the last of them is
   * deleted (`forgetOlderBuildsWhenFreed`). Also removes the older builds no VM stands on any
   * more (those of VMs deleted while the daemon was down). Returns the rebuilds under way
   * (undefined when there are none).
   */
  async refreshOutdated(): Promise<{ done: Promise<void> } | undefined> {
    await this.forgetOlderBuilds();
    if (!this.config.build_default_image || !this.images.rebuildImage) return undefined;
    const outdated = (await this.images.listImages(this.inUse)).filter((i) => i.outdated);
    const rebuilds: Promise<void>[] = [];
    for (const image of outdated) {
      if (this.rebuilding.has(image.id)) continue;
      const started = this.images.rebuildImage(image.id);
      this.rebuilding.add(image.id);
      const on = this.inUse(image.id);
      this.log.info(
        { image: image.id, ...(on.length ? { in_use_by: on } : {}) },
        `building the image again: it was built by an older svc${on.length ? "; the VMs on it keep the build they stand on (svc agent deploy NAME brings one's agent up to date), new VMs get the new one" : ''}`,
      );
      rebuilds.push(
        this.afterBuild(image.id, Promise.all([this.snapshots.removeImage(image.id), started]), {
          built: 'the image is built anew',
          failed: 'the image did not build again; it stays as it was',
        })
          .then(() => this.forgetOlderBuilds())
          .finally(() => this.rebuilding.delete(image.id)),
      );
    }
    return rebuilds.length ? { done: Promise.all(rebuilds).then(() => undefined) } : undefined;
  }

  /**
   * From now on, an older build of an image (refreshOutdated) is removed as soon as the last VM
   * that stood on it is deleted, not at the daemon's next start. Returns the unsubscribe.
   */
  forgetOlderBuildsWhenFreed(): () => void {
    return this.vms.watch((change) => {
      if (change.event === 'removed') void this.forgetOlderBuilds();
    });
  }

  /** The older builds of the images no VM stands on any more, removed (a failure is logged). */
  private async forgetOlderBuilds(): Promise<void> {
    try {
      const standing = (id: string) => this.onImage(id).map((r) => this.keeper.ref(r));
      for (const id of (await this.images.forgetOlderBuilds?.(standing)) ?? [])
        this.log.info({ image: id }, 'removed older builds of the image that no VM stands on any more');
    } catch (err) {
      this.log.warn({ err: errorMessage(err) }, 'could not remove the older builds of images');
    }
  }

  /** A background build's end, logged: the image's default shape captured after it; a failure said. */
  private afterBuild(id: string, build: Promise<unknown>, said: { built: string; failed: string }): Promise<void> {
    const t0 = Date.now();
    return build.then(
      () => {
        this.log.info({ image: id, took_ms: Date.now() - t0 }, said.built);
        this.snapshotDefaultShape(id);
      },
      (err: unknown) => this.log.warn({ image: id, err: errorMessage(err) }, said.failed),
    );
  }

  /**
   * POST /images/resolve: what a pull of a registry's reference would take now, the digest of its
   * linux/amd64 manifest, so a caller that keeps pulled images by digest (E2B's builds) sees a
   * tag that moved. The login, if any, goes to the registry alone.
   */
  async resolve(body: unknown): Promise<{ from: string; digest: string }> {
    const source = parseRegistryResolve(body);
    const digest = await this.images.registryDigest(source, this.config.insecure_registries);
    return { from: `docker://${source.ref}`, digest };
  }

  /**
   * A built image gets its snapshot in the default shape (config `cpus`, and `memory_mb` or the
   * image's least when that is more) in the background, so the first create of it restores
   * instead of booting (docs/snapshot-creates.md).
   */
  snapshotDefaultShape(id: string): void {
    void this.snapshots.prepareImage(id, 'default');
  }

  /** The records of the VMs (templates and warm pool members included) whose disks stand on the image. */
  private onImage(id: string): VmRecord[] {
    return this.vms.all().filter((r) => r.image === id);
  }

  /** The names of the VMs whose disks stand on the image. */
  private readonly inUse = (id: string): string[] =>
    this.onImage(id)
      .map((r) => r.name)
      .sort();

  async list(): Promise<ImageDetails[]> {
    return (await this.images.listImages(this.inUse)).map((i) => this.withSnapshots(i));
  }

  async get(id: string): Promise<ImageDetails> {
    return this.withSnapshots(await this.images.getImage(assertImageId(id, 'image'), this.inUse));
  }

  private withSnapshots(image: ImageDetails): ImageDetails {
    const snapshots = this.snapshots
      .of(image.id)
      .map(({ cpus, memory_mb, entrypoint, disk_gb, size_bytes, created_at, capture_ms }) => ({
        cpus,
        memory_mb,
        ...(entrypoint !== undefined ? { entrypoint } : {}),
        disk_gb,
        size_bytes,
        created_at,
        capture_ms,
      }))
      .sort((a, b) => a.cpus - b.cpus || a.memory_mb - b.memory_mb);
    return { ...image, snapshots };
  }

  /** 409 while a VM, a template or the warm pool's template uses it. */
  async remove(id: string): Promise<{ message: string; id: string }> {
    const img = await this.get(id);
    return this.activity.timed('image.delete', img.id, async () => {
      if (img.in_use_by.length)
        throw new AlreadyExistsError(
          `image ${img.id} is in use by ${img.in_use_by.join(', ')}; delete those vms first`,
        );
      const pool = this.config.warm_pool.template;
      if (pool && this.vms.find(pool)?.image === img.id)
        throw new AlreadyExistsError(`image ${img.id} is in use by the warm pool (template ${pool})`);
      await this.snapshots.removeImage(img.id);
      await this.images.removeImage(img.id);
      return { message: `image ${img.id} deleted`, id: img.id };
    });
  }
}
