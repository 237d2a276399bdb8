import type { Mount } from '../../../domain/vm.js';
import type { MountRule, SaveOptions, VmRef } from '../../../ports/hypervisor.js';
import { checkHostDirs } from '../host-dirs.js';
import { addedMountScript, releaseMountScript } from '../guest-mounts.js';
import { checkDriver } from './mounts.js';
import { replugShares, unplugShares } from './share-plug.js';
import type { Live } from './live-vms.js';
import type { LiveVms } from './live-vms.js';
import type { VmCommand } from './vm-command.js';

/**
 * A QEMU VM's host folders across its saves. A share's device cannot be saved (QEMU's 9p and
 * virtio-fs refuse a guest that has it mounted), and a state saved with it would not load where
 * shares are added after the load (qemu-args.ts): so a save first has the guest let go of them
 * (the mount scripts, run by the daemon through the agent), unplugs them, and, where the guest runs
 * on, plugs them back. 9p shares can be given to a loaded guest; virtio-fs ones only at boot, so a
 * guest with those is not saved.
 */
export class QemuShares {
  constructor(private readonly d: { command: VmCommand; live: LiveVms; mountDriver: '9p' | 'virtiofs' }) {}

  /** The script a restored guest runs to mount its folders, where they can be given to it. */
  afterRestore(mounts: Mount[]): string | undefined {
    return this.d.command.sharesAfterLoad ? addedMountScript(mounts) : undefined;
  }

  /** The script a guest runs to let go of its folders before a save, where it can have them back. */
  release(mounts: Mount[]): string | undefined {
    return this.d.command.sharesAfterLoad ? releaseMountScript(mounts) : undefined;
  }

  /** Plugs back the shares of a running guest a save left out (those still in are left as they are). */
  async giveBack(vm: VmRef, mounts: Mount[]): Promise<void> {
    if (mounts.length) await replugShares(this.d.live.running(vm.name).qmp, mounts);
  }

  async check(mounts: Mount[], rule: MountRule): Promise<Mount[]> {
    const real = await checkHostDirs(mounts, rule);
    if (mounts.length) checkDriver(this.d.mountDriver);
    return real;
  }

  /**
   * Runs `save` on `v` with its shares unplugged, and plugs them back after it when `back` (a
   * capture: the guest runs on; a suspend's QEMU quits). A guest that has shares it did not let go
   * of (`sharesReleased`) is refused with `refusal`'s error before anything is touched.
   */
  async saveWithout<T>(
    v: Live,
    vm: VmRef,
    options: SaveOptions,
    how: { back: boolean; refusal: (m: string) => Error },
    save: () => Promise<T>,
  ): Promise<T> {
    const shares = v.spec?.mounts ?? [];
    if (shares.length && !(options.sharesReleased && this.d.command.sharesAfterLoad))
      throw how.refusal(`vm ${vm.name} shares host folders it did not let go of`);
    if (!shares.length) return save();
    try {
      await unplugShares(v.qmp, shares.length);
      return await save();
    } finally {
      if (how.back) await replugShares(v.qmp, shares);
    }
  }
}
