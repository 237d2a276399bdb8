import { inject, injectable, optional } from 'inversify';
import { checkCpus, type ShapeChange } from '../domain/create-request.js';
import { InvalidArgumentError, InvalidStateError, NotFoundError, NotSupportedError } from '../domain/errors.js';
import { toPublic, type Instance, type VmRecord } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import { GuestImages } from '../ports/guest-images.js';
import { Hypervisor } from '../ports/hypervisor.js';
import { Activity } from './activity.js';
import { ClusterService } from './cluster-service.js';
import { VmKeeper } from './vm-keeper.js';
import { Vms } from './vms.js';

/**
 * A stopped VM's shape changed (PATCH /vms/{name}, `svc edit`): its CPUs and memory for its next
 * boot, and its disk grown (never shrunk), as Lima's `limactl edit` and Multipass's `set` do. Only
 * while it is stopped (or in error, persistent) with no saved state: a running guest would not see
 * the change, and a saved state holds the machine it was saved from (docs/api.md, "Changing a
 * VM's shape").
 */
@injectable()
export class VmEdit {
  constructor(
    @inject(Vms) private readonly vms: Vms,
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(VmKeeper) private readonly keeper: VmKeeper,
    @inject(GuestImages) private readonly images: GuestImages,
    @inject(Activity) private readonly activity: Activity,
    @inject(Clock) private readonly clock: Clock,
    @inject(ClusterService) @optional() private readonly cluster: ClusterService | undefined,
  ) {}

  async edit(name: string, change: ShapeChange): Promise<Instance> {
    return this.activity.timed('edit', name, () =>
      this.vms.withVm(name, async (rec) => {
        if (rec.pool) throw new NotFoundError(`vm ${name} not found`);
        await this.assertStopped(rec);
        const next = { cpus: rec.cpus, memory_mb: rec.memory_mb, disk_gb: rec.disk_gb, ...change };
        if (change.cpus !== undefined) checkCpus(next.cpus, this.hv.maxCpus);
        const image = await this.images.resolveImage(rec.image).catch(() => undefined);
        if (image?.min_memory_mb && next.memory_mb < image.min_memory_mb)
          throw new InvalidArgumentError(
            `memory_mb ${next.memory_mb} is too little for image ${image.id}: it boots in at least ${image.min_memory_mb} MB`,
          );
        if (next.disk_gb < rec.disk_gb)
          throw new InvalidArgumentError(
            `disk_gb ${next.disk_gb} is smaller than the disk of vm ${name} (${rec.disk_gb} GB): a disk only grows`,
          );
        if (next.disk_gb > rec.disk_gb && !this.hv.growDisk)
          throw new NotSupportedError(`the ${this.hv.kind} hypervisor cannot grow a VM's disk`);
        // In a cluster, the node's room for the new shape first (docs/cluster.md).
        const giveBack = await this.cluster?.reshape(rec, next);
        try {
          // The disk first: a daemon that dies between the two finds a disk larger than its
          // record, which a start takes as it is (the guest grows into what it finds).
          if (next.disk_gb > rec.disk_gb) await this.hv.growDisk!(this.keeper.ref(rec), next.disk_gb);
          Object.assign(rec, next, { updated_at: new Date(this.clock.now()).toISOString() });
          await this.vms.save(rec);
        } catch (err) {
          await giveBack?.();
          throw err;
        }
        return toPublic(rec);
      }),
    );
  }

  private async assertStopped(rec: VmRecord): Promise<void> {
    const how = `svc stop ${rec.name}, then edit it`;
    if (rec.status === 'suspended')
      throw new InvalidStateError(
        `vm ${rec.name} is suspended: its saved state holds the machine it was saved from; restore it and ${how}`,
      );
    // A persistent VM in error (its VMM died: out of memory, say) is edited as a stopped one, to start again.
    if (rec.status !== 'stopped' && !(rec.status === 'error' && rec.persistent))
      throw new InvalidStateError(`vm ${rec.name} is ${rec.status}: a VM's shape changes while it is stopped (${how})`);
    if (await this.hv.hasSavedState(this.keeper.ref(rec)))
      throw new InvalidStateError(
        `vm ${rec.name} has a saved state, which holds the machine it was saved from: restore it and ${how}`,
      );
  }
}
