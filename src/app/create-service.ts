import { inject, injectable, optional } from 'inversify';
import { assertSecretsExist } from './egress-service.js';
import type { CreateRequest, WaitMode } from '../domain/create-request.js';
import {
  checkCpus,
  defaultDiskGb,
  defaultMemoryMb,
  parseCreateRequest,
  parseCreateTimeout,
  parseWaitMode,
} from '../domain/create-request.js';
import { InvalidArgumentError, NotFoundError, NotSupportedError, UnavailableError } from '../domain/errors.js';
import { snapshotOfSource, snapshotSource } from '../domain/snapshots.js';
import type { CreateProgressEvent } from '../domain/events.js';
import type { Instance, VmRecord } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import type { ImageInfo } from '../ports/guest-images.js';
import { HostLinks, Hypervisor } from '../ports/hypervisor.js';
import { GuestImages } from '../ports/guest-images.js';
import { SecretStore } from '../ports/stores.js';
import { AsyncQueue } from './async-queue.js';
import type { Config } from './config.js';
import { AppConfig } from './tokens.js';
import { beforeDeadline } from './deadline.js';
import { coldBootReason, VmKeeper } from './vm-keeper.js';
import { Vms } from './vms.js';
import { Failpoints } from '../ports/failpoints.js';
import { CloneSpeedUps } from '../ports/clone-speed-ups.js';
import { GuestReadiness } from './guest-readiness.js';
import { GuestShares } from './guest-shares.js';
import { ImageSnapshots } from './image-snapshots.js';
import { CreateDisks, type DiskSource } from './create-disks.js';
import { CreateOutcomes, type CreateJob } from './create-outcome.js';
import { PoolClaims } from './pool-claims.js';

export type { CreateJob } from './create-outcome.js';

/**
 * Creating VMs: from the image (cold boot), from a template (a copy of its disk, restored from its
 * snapshot when it has one), or from the warm pool (a suspended member renamed and restored). A
 * create runs on its own; its progress goes to a queue the caller may read. A failed create
 * leaves nothing behind but its logs.
 */
@injectable()
export class CreateService {
  constructor(
    @inject(AppConfig) private readonly config: Config,
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(GuestImages) private readonly images: GuestImages,
    @inject(HostLinks) private readonly links: HostLinks,
    @inject(GuestShares) private readonly shares: GuestShares,
    @inject(Clock) private readonly clock: Clock,
    @inject(Vms) private readonly vms: Vms,
    @inject(VmKeeper) private readonly keeper: VmKeeper,
    @inject(Failpoints) private readonly failpoints: Failpoints,
    @inject(GuestReadiness) private readonly readiness: GuestReadiness,
    @inject(ImageSnapshots) private readonly snapshots: ImageSnapshots,
    @inject(CreateDisks) private readonly createDisks: CreateDisks,
    @inject(SecretStore) private readonly secretStore: SecretStore,
    @inject(PoolClaims) private readonly claims: PoolClaims,
    @inject(CreateOutcomes) private readonly outcomes: CreateOutcomes,
    @inject(CloneSpeedUps) @optional() private readonly speedUps: CloneSpeedUps | undefined,
  ) {}

  /**
   * Validates a create, reserves the name and resources, and starts the create in the background.
   * Throws (before anything exists) InvalidArgumentError, AlreadyExistsError or ResourceExhaustedError.
   */
  async create(
    body: unknown,
    query: { wait?: unknown; timeout?: unknown },
    internal: { pool?: string; fork?: { source: VmRecord; capture: string } } = {},
  ): Promise<CreateJob> {
    const req = parseCreateRequest(body);
    if (req.egress_secrets) await assertSecretsExist(this.secretStore, req.egress_secrets);
    const wait = parseWaitMode(query.wait);
    const timeoutMs = parseCreateTimeout(query.timeout) ?? this.config.ready_timeout_ms + this.config.create_buffer_ms;
    if (req.from_pool) {
      const pool = this.config.warm_pool.template;
      if (!pool) throw new InvalidArgumentError('from_pool: no warm_pool is configured');
      // A member runs already, and shares are added to a guest only as it starts: a create with
      // host folders is a clone of the pool's template.
      const claimed = req.mounts.length ? undefined : await this.claims.claim(req, wait, timeoutMs);
      if (claimed) return claimed;
      req.from = pool; // the pool is empty: clone the template directly
    }
    // A fork's template is its source, running: what it stands on is the capture ForkService made.
    // A create from a named snapshot stands on the snapshot, whatever its VM does now.
    const named = req.snapshot !== undefined ? this.namedSnapshot(req.from!, req.snapshot) : undefined;
    const template =
      internal.fork?.source ?? named?.template ?? (req.from === undefined ? undefined : this.vms.templateOf(req.from));
    const capture = internal.fork?.capture ?? named?.source;
    req.mounts = await this.links.checkMounts(req.mounts, {
      // E2B's volumes are svc's own folders, shared by the sandboxes that name them (docs/e2b.md)
      allowed: [...this.config.mount_dirs, this.config.e2b_volumes_dir],
      forbidden: [this.config.data_dir, this.config.images_dir],
    });
    // A template's saved state is restored into the clone, which is given the shares as it wakes.
    const restores = named ? named.memory : template?.status === 'suspended' || capture !== undefined;
    if (restores && req.mounts.length && template?.agent_missing)
      throw new InvalidArgumentError(
        `mounts on a clone of ${template.name}, which is restored: it has no svc-agent to mount them as it wakes; clone it stopped, or deploy the agent into it first`,
      );
    if (restores && !this.shares.restorable(req))
      throw new NotSupportedError(
        `mounts on a clone of ${template?.name}, which is restored: the ${this.hv.kind} hypervisor, as configured, attaches host folders only when a guest boots (QEMU's mount_driver 9p adds them to a restored one)`,
      );
    const image = await this.images.resolveImage(template?.image ?? req.image ?? this.config.image);
    // A size left out is the config's, or the image's least when that is more (defaultDiskGb,
    // defaultMemoryMb); one asked for below the image's least is refused.
    const diskGb = template?.disk_gb ?? req.disk_gb ?? defaultDiskGb(this.config.disk_gb, image);
    const memoryMb = template?.memory_mb ?? req.memory_mb ?? defaultMemoryMb(this.config.memory_mb, image);
    if (image.min_memory_mb && memoryMb < image.min_memory_mb)
      throw new InvalidArgumentError(
        `memory_mb ${memoryMb} is too little for image ${image.id}: it boots in at least ${image.min_memory_mb} MB`,
      );
    if (diskGb < image.min_disk_gb)
      throw new InvalidArgumentError(
        `disk_gb ${diskGb} is smaller than image ${image.id}: it needs at least ${image.min_disk_gb}`,
      );
    if (!template) checkCpus(req.cpus ?? this.config.cpus, this.hv.maxCpus);
    // A plain create restores its image's snapshot when one fits (image-snapshots.ts).
    const start =
      template || internal.pool
        ? undefined
        : await this.snapshots.choose(
            req,
            image,
            {
              cpus: req.cpus ?? this.config.cpus,
              memory_mb: memoryMb,
              entrypoint: req.entrypoint === true ? undefined : req.entrypoint,
            },
            diskGb,
          );
    // From here to the map insert there is no await: the checks and the reservation are atomic.
    // A clone is its template's machine: its shape, and its egress policy unless the request gives one.
    const rec = this.vms.reserve(
      template
        ? {
            ...req,
            cpus: template.cpus,
            memory_mb: template.memory_mb,
            disk_gb: template.disk_gb,
            egress: req.egress ?? template.egress,
            egress_secrets: req.egress_secrets ?? template.egress_secrets,
            entrypoint: template.entrypoint,
          }
        : { ...req, disk_gb: diskGb, memory_mb: memoryMb },
      image,
      internal.pool,
    );
    // A clone has its template's disk: an agent deployed there is in the clone too.
    if (template && !template.agent_missing) delete rec.agent_missing;
    if (template) rec.from = template.name;
    const queue = new AsyncQueue<CreateProgressEvent>();
    const done = this.vms.locked(rec.name, () =>
      this.runCreate(rec, req, image, wait, timeoutMs, queue, { template, capture, start }),
    );
    done.catch(() => undefined);
    return { name: rec.name, events: queue, done };
  }

  /**
   * The VM `from` as its snapshot `name` holds it: the snapshot's shape on the VM's record (a
   * copy), and how VmDisks.clone is told of it. NotFoundError for either.
   */
  private namedSnapshot(from: string, name: string): { template: VmRecord; source: string; memory: boolean } {
    const rec = this.vms.get(from);
    if (rec.pool) throw new NotFoundError(`vm ${from} not found`);
    const snap = rec.snapshots?.find((s) => s.name === name);
    // (A driver that keeps no snapshots has none to find.)
    if (!snap) throw new NotFoundError(`vm ${from} has no snapshot ${name}`);
    return {
      template: { ...rec, cpus: snap.cpus, memory_mb: snap.memory_mb, disk_gb: snap.disk_gb },
      source: snapshotSource(name),
      memory: snap.memory,
    };
  }

  private async runCreate(
    rec: VmRecord,
    req: CreateRequest,
    image: ImageInfo,
    wait: WaitMode,
    timeoutMs: number,
    queue: AsyncQueue<CreateProgressEvent>,
    from: DiskSource,
  ): Promise<Instance> {
    const { template, capture, start } = from;
    const t0 = this.clock.now();
    let deadline = t0 + timeoutMs;
    const emit = this.outcomes.emitter(rec, queue, t0);
    emit('accepted', `creating vm ${rec.name} from image ${image.id}`);
    try {
      await beforeDeadline(this.clock, deadline, this.vms.save(rec));
      this.failpoints.hit('create.saved');
      if (!image.built) {
        // The first create of a built-in image builds it (shared with any create that asks meanwhile).
        const took = image.build_estimate_ms;
        emit(
          'image',
          `building image ${image.id} ${image.outdated ? 'again (an older svc built it' : 'first (its first use here'}; ${took ? `the last build took ${Math.round(took / 1000)} s` : 'a minute or two'}), then the vm`,
          { percent: 0 },
        );
        await this.images.ensureImage(image.id, (p) => emit('image', p.message, { percent: p.percent }));
        deadline = this.clock.now() + timeoutMs; // the deadline is the VM's: it starts once the image is there
      }
      const spec = await this.keeper.spec(rec, req.forwards);
      const copy = start && 'snapshot' in start ? start : undefined;
      const snapshot = await this.createDisks.prepare(rec, spec, image, from, deadline, emit);
      // A member of a suspended pool is suspended once up: its start yields the CPU to VMs people wait on.
      const background = rec.pool !== undefined && !this.config.warm_pool.running;
      const handle = await beforeDeadline(
        this.clock,
        deadline,
        this.hv.launch(spec, { restore: snapshot, background }),
      );
      this.failpoints.hit('create.launched');
      this.keeper.applyHandle(rec, handle);
      // A fork that came up cold-booted has lost what it was forked for (its processes, its memory).
      // What QEMU said is the error; a fork again may load (QEMU 7.2 dies now and then restoring).
      if (capture && !snapshotOfSource(capture) && !handle.restored_from_snapshot)
        throw new UnavailableError(
          `fork ${rec.name} could not be restored from the capture of ${template?.name}: ${handle.cold_boot_reason ?? 'QEMU could not load it'}; fork again`,
        );
      // A clone of a suspended template that came up cold-booted has none of the template's
      // processes or memory: it is made all the same, and its answer says so.
      const coldWhy = template && snapshot ? coldBootReason(handle) : undefined;
      const cold = coldWhy && `cold-booted, the template's processes did not come along: ${coldWhy}`;
      await this.vms.save(rec);
      // A clone must not be its template's twin: new name, machine id and clock before it is ready
      // (as the first agent call when it was restored from a snapshot; after the health probe when it cold-booted).
      const restored = snapshot && handle.restored_from_snapshot;
      await this.readiness.awaitReady(
        rec,
        GuestReadiness.waitFor(wait, image),
        deadline,
        emit,
        image,
        template || copy
          ? {
              fresh: true,
              restored,
              // A copy of an image's snapshot has the snapshot's disk size, and booted without the userdata.
              grow: copy !== undefined && rec.disk_gb > copy.snapshot.disk_gb,
              userdata: copy && restored ? rec.userdata : undefined,
            }
          : undefined,
        { pid: handle.pid, again: () => this.keeper.bootAgain(rec, spec) },
      );
      this.failpoints.hit('create.ready');
      const inst = await this.outcomes.created(
        rec,
        t0,
        emit,
        { image: image.id, wait, from: template?.name, from_snapshot: snapshot, image_snapshot: copy !== undefined },
        { warning: cold },
      );
      if (template || copy) this.speedUps?.cloneReady(this.keeper.ref(rec));
      // The first create of a shape booted: its snapshot is made now, for the next ones.
      if (start && 'reason' in start && start.capture) {
        void this.snapshots.prepareImage(image.id, rec);
      }
      return inst;
    } catch (err) {
      return await this.outcomes.failed(rec, err, t0, emit);
    } finally {
      queue.close();
    }
  }
}
