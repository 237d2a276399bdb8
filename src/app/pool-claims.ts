import { randomBytes } from 'node:crypto';
import { inject, injectable } from 'inversify';
import { bindEgressSecrets, type EgressSecretSpec } from '../domain/egress-secrets.js';
import { lifetimeOf } from '../domain/lifetime.js';
import type { CreateRequest, WaitMode } from '../domain/create-request.js';
import type { CreateProgressEvent } from '../domain/events.js';
import type { Instance, VmRecord } from '../domain/vm.js';
import { changeStatus } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import type { ImageInfo } from '../ports/guest-images.js';
import { HostLinks, Hypervisor, VmDisks } from '../ports/hypervisor.js';
import { GuestImages } from '../ports/guest-images.js';
import { Failpoints } from '../ports/failpoints.js';
import { GuestNetwork } from '../ports/guest-network.js';
import { VmStore } from '../ports/stores.js';
import { AsyncQueue } from './async-queue.js';
import type { Config } from './config.js';
import { CreateOutcomes, type CreateJob } from './create-outcome.js';
import { beforeDeadline } from './deadline.js';
import { GuestReadiness } from './guest-readiness.js';
import { LifecycleEvents } from './lifecycle-events.js';
import { AppConfig } from './tokens.js';
import { VmKeeper } from './vm-keeper.js';
import { Vms } from './vms.js';

/**
 * Creates answered from the warm pool (docs/config.md, `warm_pool`): a suspended (or running) member of the
 * pool's template is renamed to the request's name, restored with its tags and forwards, and given
 * its own identity, instead of a VM made from nothing.
 */
@injectable()
export class PoolClaims {
  constructor(
    @inject(AppConfig) private readonly config: Config,
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(VmDisks) private readonly disks: VmDisks,
    @inject(GuestImages) private readonly images: GuestImages,
    @inject(HostLinks) private readonly links: HostLinks,
    @inject(VmStore) private readonly store: VmStore,
    @inject(Clock) private readonly clock: Clock,
    @inject(LifecycleEvents) private readonly events: LifecycleEvents,
    @inject(Vms) private readonly vms: Vms,
    @inject(VmKeeper) private readonly keeper: VmKeeper,
    @inject(Failpoints) private readonly failpoints: Failpoints,
    @inject(GuestNetwork) private readonly network: GuestNetwork,
    @inject(GuestReadiness) private readonly readiness: GuestReadiness,
    @inject(CreateOutcomes) private readonly outcomes: CreateOutcomes,
  ) {}

  /**
   * Hands out a suspended warm pool member: picked, renamed and marked in one synchronous step (so
   * concurrent creates never get the same one), then restored with the request's tags and forwards
   * and given its identity. Resolves undefined when no member is ready.
   */
  async claim(req: CreateRequest, wait: WaitMode, timeoutMs: number): Promise<CreateJob | undefined> {
    const pool = this.config.warm_pool.template;
    const image = await this.images.resolveImage(this.vms.find(pool)?.image ?? this.config.image);
    const name = req.name ?? this.vms.nextName();
    const taken = this.vms.takePoolMember(pool, name, this.config.warm_pool.running);
    if (!taken) return undefined;
    const { member, oldName, wasRunning } = taken;
    changeStatus(member, { to: 'creating' });
    Object.assign(member, {
      persistent: req.persistent,
      tags: req.tags,
      from: pool,
      egress: req.egress ?? member.egress,
      egress_secrets: specsOrNone(req.egress_secrets ?? member.egress_secrets),
      metrics_enabled: req.metrics_enabled ?? this.config.sandbox_metrics_enabled,
      forwards: [],
      created_at: new Date(this.clock.now()).toISOString(),
      ...lifetimeOf(req, this.clock.now()),
    });
    const queue = new AsyncQueue<CreateProgressEvent>();
    const done = this.vms.locked(name, () =>
      this.runClaim(member, oldName, wasRunning, req, image, wait, timeoutMs, queue),
    );
    done.catch(() => undefined);
    return { name, events: queue, done };
  }

  private async runClaim(
    rec: VmRecord,
    oldName: string,
    wasRunning: boolean,
    req: CreateRequest,
    image: ImageInfo,
    wait: WaitMode,
    timeoutMs: number,
    queue: AsyncQueue<CreateProgressEvent>,
  ): Promise<Instance> {
    const t0 = this.clock.now();
    const deadline = t0 + timeoutMs;
    const emit = this.outcomes.emitter(rec, queue, t0);
    emit('accepted', `claiming warm pool member ${oldName} of template ${rec.from}`);
    try {
      await this.store.rename(oldName, rec.name);
      this.failpoints.hit('claim.renamed');
      await this.disks.rename({ name: oldName, dir: this.store.dir(oldName) }, this.keeper.ref(rec));
      await this.vms.save(rec);
      // A running member, or one restored from its snapshot, already runs its agent: the identity is the first call.
      let running = true;
      if (wasRunning) {
        // A running member: already booted; it only needs the request's forwards added live.
        emit('boot', `taking over running member ${oldName} as ${rec.name}`);
        if (req.egress) await this.network.setPolicy(this.keeper.ref(rec), rec.egress);
        this.keeper.applyHandle(rec, await this.links.addForwards(this.keeper.ref(rec), req.forwards));
      } else {
        emit('boot', `restoring ${oldName} as ${rec.name}`);
        const handle = await beforeDeadline(
          this.clock,
          deadline,
          this.hv.launch(await this.keeper.spec(rec, req.forwards), { restore: true }),
        );
        running = handle.restored_from_snapshot;
        this.keeper.applyHandle(rec, handle);
      }
      await this.vms.save(rec);
      await this.readiness.awaitReady(rec, GuestReadiness.waitFor(wait, image), deadline, emit, image, {
        fresh: true,
        restored: running,
      });
      return await this.outcomes.created(rec, t0, emit, { member: oldName }, { message: `claimed ${oldName}` });
    } catch (err) {
      return await this.outcomes.failed(rec, err, t0, emit);
    } finally {
      queue.close();
      // The pool refills once the claim has answered (or failed): a refill started beside it takes
      // the CPU from the guest being handed out, just when its first answer is what the caller waits for.
      void this.events.emit('claimed', rec);
    }
  }
}

/** A claimed member's bindings, with placeholders of its own (none stays none). */
const specsOrNone = (specs: EgressSecretSpec[] | undefined) => specs && bindEgressSecrets(specs, randomBytes, [], true);
