import { InternalError, InvalidStateError, NotSupportedError } from '../../../domain/errors.js';
import type { VmRef } from '../../../ports/hypervisor.js';
import { freeze } from './disk-layers.js';
import type { LiveVms } from './live-vms.js';
import type { QemuCaptures } from './qemu-captures.js';
import { readSaved } from './saved-state.js';
import type { SpareQemus } from './spare-qemus.js';
import { captureTop, isCaptureId } from './vm-capture.js';
import { dropSnapshot, dropSnapshots, keepSnapshot, revertTo } from './vm-snapshots.js';

/**
 * A VM's named snapshots on QEMU (docs/snapshots.md; the files: vm-snapshots.ts). A running VM's
 * is kept from a capture the daemon took of it (qemu-captures.ts); a stopped or suspended one's
 * from a freeze of its disk and saved state, as a template's for its clones. A revert needs the
 * VM's QEMU gone, no forks still linking a capture, and no spare holding the state it leaves.
 */
export class QemuSnapshots {
  constructor(
    private readonly d: {
      live: LiveVms;
      captures: QemuCaptures;
      spares: SpareQemus;
      /** A chain past this many layers is written into one at its next freeze (`max_disk_layers`). */
      maxLayers?: number;
    },
  ) {}

  /**
   * Keeps the VM as the snapshot `name` (vm-snapshots.ts): the capture just taken of it while it
   * runs (its memory included), or else its disk frozen as a clone's template's is, with its saved
   * state when it is suspended.
   */
  async take(vm: VmRef, name: string, capture?: string): Promise<{ memory: boolean }> {
    if (capture === undefined && this.d.live.has(vm.name))
      throw new InvalidStateError(`vm ${vm.name} is running: its snapshot is taken from a capture`);
    if (capture !== undefined && !isCaptureId(capture)) throw new InternalError(`not a capture: ${capture}`);
    let top = capture === undefined ? undefined : captureTop(capture);
    if (!top) {
      const saved = await readSaved(vm.dir);
      if (saved?.kind === 'snapshot')
        throw new NotSupportedError(
          `vm ${vm.name} was suspended by an older svcd (a snapshot inside its disk): restore it once, then take snapshots`,
        );
      top = await freeze(vm.dir, saved, this.d.maxLayers);
    }
    try {
      await keepSnapshot(vm.dir, name, top);
    } catch (err) {
      throw new InternalError(`cannot keep snapshot ${name} of vm ${vm.name}: ${(err as Error).message}`);
    }
    return { memory: !!top.state };
  }

  async revert(vm: VmRef, name: string): Promise<{ memory: boolean }> {
    if (this.d.live.has(vm.name))
      throw new InvalidStateError(`vm ${vm.name} is running: it is stopped before a revert`);
    if (this.d.captures.busy(vm.name))
      throw new InvalidStateError(`forks of vm ${vm.name} are being made from it; revert it once they are ready`);
    // Its next clone's QEMU, started ahead, holds the state it is leaving.
    await this.d.spares.drop(vm.name);
    return revertTo(vm.dir, name).catch((err: Error) => {
      throw new InternalError(`cannot revert vm ${vm.name} to snapshot ${name}: ${err.message}`);
    });
  }

  drop(vm: VmRef, name: string): Promise<void> {
    return dropSnapshot(vm.dir, name);
  }

  /** All of them, with the VM. */
  dropAll(vm: VmRef): Promise<void> {
    return dropSnapshots(vm.dir);
  }
}
