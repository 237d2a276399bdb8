import { inject, injectable } from 'inversify';
import type { CreatePhase, CreateProgressEvent } from '../domain/events.js';
import { NotFoundError } from '../domain/errors.js';
import { snapshotOfSource } from '../domain/snapshots.js';
import type { VmRecord } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import type { VmSpec } from '../ports/hypervisor.js';
import type { ImageInfo } from '../ports/guest-images.js';
import { VmDisks } from '../ports/hypervisor.js';
import { Failpoints } from '../ports/failpoints.js';
import { beforeDeadline } from './deadline.js';
import { ImageSnapshots, type SnapshotChoice } from './image-snapshots.js';
import { VmKeeper } from './vm-keeper.js';
import { Vms } from './vms.js';

/** What a create's disk comes from: a template (a fork's capture), an image's snapshot, or the image. */
export interface DiskSource {
  template?: VmRecord;
  capture?: string;
  start?: SnapshotChoice;
}

type Emit = (phase: CreatePhase, message: string, extra?: Partial<CreateProgressEvent>) => void;

/**
 * A create's disk step (CreateService): a template's disk shared under its lock, a fork's capture,
 * an image snapshot's layers while it cannot go, or a new disk on the image. Says what it did in
 * the progress, and whether the launch restores a saved state.
 */
@injectable()
export class CreateDisks {
  constructor(
    @inject(VmDisks) private readonly disks: VmDisks,
    @inject(Vms) private readonly vms: Vms,
    @inject(VmKeeper) private readonly keeper: VmKeeper,
    @inject(ImageSnapshots) private readonly snapshots: ImageSnapshots,
    @inject(Failpoints) private readonly failpoints: Failpoints,
    @inject(Clock) private readonly clock: Clock,
  ) {}

  /** Gives `spec` its disk; resolves with whether the launch restores a saved state. */
  async prepare(
    rec: VmRecord,
    spec: VmSpec,
    image: ImageInfo,
    from: DiskSource,
    deadline: number,
    emit: Emit,
  ): Promise<boolean> {
    const { template, capture, start } = from;
    const within = <T>(p: Promise<T>) => beforeDeadline(this.clock, deadline, p);
    if (start && 'snapshot' in start) {
      const what = `the snapshot of image ${image.id} (${rec.cpus} cpu(s), ${rec.memory_mb} MB)`;
      emit('disk', `sharing the disk of ${what}`);
      const { snapshot } = await within(
        this.snapshots.using(start.snapshot.key, () => this.disks.clone(start.ref, spec)),
      );
      this.failpoints.hit('create.disk');
      emit(snapshot ? 'restore' : 'boot', snapshot ? `restoring ${what}` : `cold-booting a copy of ${what}`);
      return snapshot;
    }
    if (template) {
      const named = snapshotOfSource(capture);
      const what = named
        ? `snapshot ${named} of vm ${template.name}`
        : capture
          ? `the capture of vm ${template.name}`
          : `template ${template.name}`;
      emit('disk', `sharing the disk of ${what}`);
      const { snapshot } = await within(
        this.vms.locked(template.name, async () => {
          // A fork's source may run on (it is only looked up), and so may a snapshot's VM, whose
          // snapshot must still be there; a template must still be one.
          if (named && !this.vms.get(template.name).snapshots?.some((s) => s.name === named))
            throw new NotFoundError(`vm ${template.name} has no snapshot ${named}`);
          if (capture) this.vms.get(template.name);
          else this.vms.templateOf(template.name);
          return this.disks.clone(this.keeper.ref(template), spec, capture);
        }),
      );
      this.failpoints.hit('clone.copied');
      emit('boot', snapshot ? `restoring from the snapshot of ${what}` : `cold-booting a copy of ${what}`);
      return snapshot;
    }
    emit('disk', `preparing a ${rec.disk_gb} GB disk`);
    await within(this.disks.provision(spec));
    this.failpoints.hit('create.disk');
    const why = start && 'reason' in start ? ` (not from a snapshot: ${start.reason})` : '';
    emit('boot', `booting with ${rec.cpus} cpu(s) and ${rec.memory_mb} MB${why}`);
    return false;
  }
}
