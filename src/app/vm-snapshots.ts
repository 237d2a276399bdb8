import { randomBytes } from 'node:crypto';
import { inject, injectable, optional } from 'inversify';
import {
  AlreadyExistsError,
  InvalidStateError,
  NotFoundError,
  NotSupportedError,
  ResourceExhaustedError,
  errorMessage,
} from '../domain/errors.js';
import { assertVmName } from '../domain/names.js';
import {
  assertSnapshotName,
  MAX_SNAPSHOTS,
  nextSnapshotName,
  publicSnapshot,
  type SnapshotRequest,
  type VmSnapshot,
} from '../domain/snapshots.js';
import { revertedTimeline } from '../domain/timeline.js';
import { changeStatus, clearRuntime, toPublic, type Instance, type VmRecord } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import { Hypervisor, VmDisks } from '../ports/hypervisor.js';
import { Logger } from '../ports/logger.js';
import { Activity } from './activity.js';
import { ClusterService } from './cluster-service.js';
import { CrashWatch } from './crash-watch.js';
import { KeptOutputs } from './kept-output.js';
import { GuestShares } from './guest-shares.js';
import { LifecycleEvents } from './lifecycle-events.js';
import { VmCaptures } from './vm-captures.js';
import { VmKeeper } from './vm-keeper.js';
import { Vms } from './vms.js';

export interface SnapshotRemoved {
  message: string;
  name: string;
  snapshot: string;
}

/**
 * A VM's named snapshots (docs/snapshots.md): taken of it running (its memory included, through
 * a capture as a fork's source is captured) or not (its disk, and its saved state when
 * suspended), listed, reverted to in place and removed, as Lima's `limactl snapshot` and
 * Multipass's `snapshot`/`restore` do. The record lists them; their files are the hypervisor's.
 */
@injectable()
export class VmSnapshots {
  constructor(
    @inject(Vms) private readonly vms: Vms,
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(VmDisks) private readonly disks: VmDisks,
    @inject(VmKeeper) private readonly keeper: VmKeeper,
    @inject(VmCaptures) private readonly captures: VmCaptures,
    @inject(GuestShares) private readonly shares: GuestShares,
    @inject(LifecycleEvents) private readonly events: LifecycleEvents,
    @inject(CrashWatch) private readonly crashes: CrashWatch,
    @inject(Activity) private readonly activity: Activity,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
    @inject(KeptOutputs) private readonly keptOutputs: KeptOutputs,
    @inject(ClusterService) @optional() private readonly cluster: ClusterService | undefined,
  ) {}

  list(name: string): VmSnapshot[] {
    return (this.record(name).snapshots ?? []).map(publicSnapshot);
  }

  get(name: string, snapshot: string): VmSnapshot {
    return publicSnapshot(this.find(this.record(name), snapshot));
  }

  async take(name: string, req: SnapshotRequest): Promise<VmSnapshot> {
    assertVmName(name);
    return this.activity.timed(
      'snapshot',
      name,
      () =>
        this.vms.withVm(name, async (rec) => {
          if (rec.pool) throw new NotFoundError(`vm ${name} not found`);
          if (!this.disks.snapshot) throw new NotSupportedError(`the ${this.hv.kind} hypervisor keeps no snapshots`);
          const list = rec.snapshots ?? [];
          const snap = req.name ?? nextSnapshotName(list);
          if (list.some((s) => s.name === snap))
            throw new AlreadyExistsError(`vm ${name} has a snapshot ${snap} already`);
          if (list.length >= MAX_SNAPSHOTS)
            throw new ResourceExhaustedError(
              `vm ${name} has ${MAX_SNAPSHOTS} snapshots, the most a vm keeps: delete one first (svc snapshot rm ${name} SNAPSHOT)`,
            );
          const from = this.takeable(rec);
          // Before the guest is held: bytes its processes wrote by then are the snapshot's too; a
          // suspended guest's were noted before it was saved, a paused one's before its pause.
          const kept = from === 'running' ? await this.keptOutputs.note(rec) : rec.saved_output;
          const memory =
            from === 'running' || from === 'paused' ? await this.ofRunning(rec, snap) : await this.ofStopped(rec, snap);
          const made: VmSnapshot = {
            name: snap,
            created_at: new Date(this.clock.now()).toISOString(),
            memory,
            taken_from: from,
            cpus: rec.cpus,
            memory_mb: rec.memory_mb,
            disk_gb: rec.disk_gb,
            ...(req.description !== undefined ? { description: req.description } : {}),
            ...(kept && memory ? { kept_output: kept } : {}),
            ...(rec.timeline ? { timeline: rec.timeline.id } : {}),
          };
          // The files first: a daemon that dies between leaves a folder no record names, which a
          // snapshot of the same name replaces and the VM's delete removes.
          rec.snapshots = [...list, made];
          await this.vms.save(rec);
          return publicSnapshot(made);
        }),
      { noteOf: (s) => s.name },
    );
  }

  /**
   * Puts the VM back to the snapshot, whatever it is doing: a guest that runs is stopped at once
   * (what it did since is what a revert undoes). A snapshot with memory resumes its guest as it
   * ran; one without leaves the VM stopped, its disk the snapshot's. The VM takes the snapshot's
   * shape back (its saved guest needs the machine it was saved on).
   */
  async revert(name: string, snapshot: string): Promise<Instance> {
    assertVmName(name);
    assertSnapshotName(snapshot);
    let cold: string | undefined;
    return this.activity.timed(
      'revert',
      name,
      () =>
        this.vms.withVm(name, async (rec) => {
          if (rec.pool) throw new NotFoundError(`vm ${name} not found`);
          const snap = this.find(rec, snapshot);
          if (!this.disks.revert) throw new NotSupportedError(`the ${this.hv.kind} hypervisor keeps no snapshots`);
          if (rec.status === 'creating') throw new InvalidStateError(`vm ${name} is being created; wait for it`);
          // In a cluster, the node's room for the snapshot's shape first (docs/cluster.md): a
          // revert refused for it leaves the VM as it was.
          const giveBack = await this.cluster?.reshape(rec, snap);
          if (rec.status === 'running' || rec.status === 'paused') {
            await this.events.emit('down', rec);
            await this.crashes.expectExit(rec, () => this.hv.kill(this.keeper.ref(rec)));
          }
          // Stopped first: a revert that fails leaves a VM that starts (on its old disk or the snapshot's).
          if (rec.status !== 'stopped') changeStatus(rec, { to: 'stopped' });
          clearRuntime(rec);
          await this.vms.save(rec);
          const { memory } = await this.disks.revert(this.keeper.ref(rec), snap.name).catch(async (err: unknown) => {
            await giveBack?.();
            throw err;
          });
          Object.assign(rec, { cpus: snap.cpus, memory_mb: snap.memory_mb, disk_gb: snap.disk_gb });
          // Another history of the guest from here: readers of the one it leaves are told (docs/processes.md).
          rec.timeline = revertedTimeline(
            snap.timeline,
            memory ? snap.kept_output : undefined,
            randomBytes(6).toString('hex'),
          );
          rec.updated_at = new Date(this.clock.now()).toISOString();
          if (!memory) {
            await this.vms.save(rec);
            return toPublic(rec);
          }
          changeStatus(rec, { to: 'suspended', at: rec.updated_at });
          // Left suspended if its boot fails: the saved guest is the snapshot's, its bytes noted.
          if (snap.kept_output) rec.saved_output = snap.kept_output;
          await this.vms.save(rec);
          cold = await this.keeper.boot(rec, true);
          if (!cold) return toPublic(rec);
          return { ...toPublic(rec), warning: `cold-booted, the snapshot's processes did not come back: ${cold}` };
        }),
      { noteOf: () => (cold ? `${snapshot}, cold-booted: ${cold}` : snapshot) },
    );
  }

  async remove(name: string, snapshot: string): Promise<SnapshotRemoved> {
    assertVmName(name);
    assertSnapshotName(snapshot);
    return this.activity.timed('snapshot.delete', name, () =>
      this.vms.withVm(name, async (rec) => {
        if (rec.pool) throw new NotFoundError(`vm ${name} not found`);
        this.find(rec, snapshot);
        // The record first: a daemon that dies between leaves files no record names, not the reverse.
        rec.snapshots = (rec.snapshots ?? []).filter((s) => s.name !== snapshot);
        if (!rec.snapshots.length) delete rec.snapshots;
        await this.vms.save(rec);
        await this.disks.dropSnapshot?.(this.keeper.ref(rec), snapshot).catch((err: unknown) => {
          this.log.warn({ vm: name, snapshot, err: errorMessage(err) }, 'cannot remove the files of a snapshot');
        });
        return { message: `snapshot ${snapshot} of vm ${name} deleted`, name, snapshot };
      }),
    );
  }

  private record(name: string): VmRecord {
    assertVmName(name);
    const rec = this.vms.get(name);
    if (rec.pool) throw new NotFoundError(`vm ${name} not found`);
    return rec;
  }

  private find(rec: VmRecord, snapshot: string): VmSnapshot {
    assertSnapshotName(snapshot);
    const snap = rec.snapshots?.find((s) => s.name === snapshot);
    if (!snap) throw new NotFoundError(`vm ${rec.name} has no snapshot ${snapshot}`);
    return snap;
  }

  /** The status a snapshot is taken from, or why it cannot be. */
  private takeable(rec: VmRecord): VmSnapshot['taken_from'] {
    if (rec.status === 'creating') throw new InvalidStateError(`vm ${rec.name} is being created; wait for it`);
    if ((rec.status === 'running' || rec.status === 'paused') && rec.mounts.length) {
      if (!this.shares.restorable(rec))
        throw new NotSupportedError(
          `vm ${rec.name} shares host folders, which this hypervisor attaches only when a guest boots: stop it to take a snapshot of its disk`,
        );
      if (rec.status === 'paused')
        throw new InvalidStateError(
          `vm ${rec.name} is paused and shares host folders, which its guest lets go of for the snapshot: resume it first`,
        );
    }
    return rec.status;
  }

  /** A running guest is captured (held for a moment), and the capture kept under the name. */
  private async ofRunning(rec: VmRecord, snap: string): Promise<boolean> {
    const { id } = await this.captures.take(rec, 1);
    try {
      return (await this.disks.snapshot!(this.keeper.ref(rec), snap, id)).memory;
    } finally {
      await this.disks.dropCapture(this.keeper.ref(rec), id).catch((err: Error) => {
        this.log.warn({ vm: rec.name, capture: id, err: err.message }, 'cannot drop a capture');
      });
    }
  }

  private async ofStopped(rec: VmRecord, snap: string): Promise<boolean> {
    return (await this.disks.snapshot!(this.keeper.ref(rec), snap)).memory;
  }
}
