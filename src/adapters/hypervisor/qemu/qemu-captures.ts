import { NotSupportedError, asDomainError } from '../../../domain/errors.js';
import type { Failpoints } from '../../../ports/failpoints.js';
import type { SaveOptions, VmRef } from '../../../ports/hypervisor.js';
import type { Logger } from '../../../ports/logger.js';
import { LiveFlattens } from './live-flatten.js';
import type { LiveVms } from './live-vms.js';
import type { QemuShares } from './qemu-shares.js';
import { captureVm, dropCapture } from './vm-capture.js';
import type { QemuVmDisks } from './vm-disks.js';

/**
 * The captures of running VMs for their forks (vm-capture.ts), and the flattens that follow them:
 * each capture leaves its VM on one more frozen layer, so once none of its captures is out, a VM
 * whose disk stands on too many is flattened while it runs on (live-flatten.ts). A save of any kind
 * waits for a flatten under way first (`settle`).
 */
export class QemuCaptures {
  private readonly flattens: LiveFlattens;
  /** How many captures each VM has out, by name. */
  private readonly out = new Map<string, number>();

  constructor(
    private readonly d: {
      live: LiveVms;
      disks: QemuVmDisks;
      shares: QemuShares;
      log: Logger;
      failpoints?: Failpoints;
      maxLayers?: number;
    },
  ) {
    this.flattens = new LiveFlattens(d.log, d.maxLayers);
  }

  settle(name: string): Promise<void> {
    return this.flattens.settle(name);
  }

  /** Has the VM captures out (forks still linking them)? */
  busy(name: string): boolean {
    return (this.out.get(name) ?? 0) > 0;
  }

  async take(vm: VmRef, forks: number, options: SaveOptions): Promise<{ id: string; paused_ms: number }> {
    const v = this.d.live.running(vm.name);
    try {
      await this.flattens.settle(vm.name);
      // Its shares are out of the capture (qemu-args.ts), and back in once it is taken.
      const got = await this.d.shares.saveWithout(
        v,
        vm,
        options,
        { back: true, refusal: (m) => new NotSupportedError(`${m}; it cannot be captured`) },
        () => captureVm(v.qmp, vm.dir, v.pid, { switching: () => this.d.failpoints?.hit('fork.switchover') }),
      );
      this.d.log.info({ vm: vm.name, capture: got.id, paused_ms: got.paused_ms, live: got.live }, 'capture timing');
      this.d.disks.expectForks(vm, got.id, forks);
      this.out.set(vm.name, (this.out.get(vm.name) ?? 0) + 1);
      return got;
    } catch (err) {
      throw asDomainError(err);
    }
  }

  /** A capture's forks have what they need: its files go, and the last one out starts a flatten. */
  async drop(vm: VmRef, id: string): Promise<void> {
    this.d.disks.forgetCapture(vm, id);
    await dropCapture(vm.dir, id);
    const out = (this.out.get(vm.name) ?? 1) - 1;
    if (out > 0) return void this.out.set(vm.name, out);
    this.out.delete(vm.name);
    const v = this.d.live.get(vm.name);
    if (v && !v.expected) this.flattens.start(vm.name, v.qmp, vm.dir);
  }
}
