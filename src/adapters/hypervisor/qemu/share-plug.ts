import type { Mount } from '../../../domain/vm.js';
import type { QmpClient, QmpEvent } from './qmp-client.js';
import { shareId, sharesToAdd } from './qemu-args.js';

/** How long a guest has to give an unplugged share back (its ACPI eject) before the save is given up. */
export const UNPLUG_TIMEOUT_MS = 10_000;

/**
 * Plugs a loaded guest's shares in once it runs, over the backends its command line named
 * (qemu-args.ts): no saved state holds a share. The guest mounts them when the daemon tells it.
 */
export async function plugShares(qmp: QmpClient, mounts: Mount[]): Promise<void> {
  for (const device of sharesToAdd(mounts)) await qmp.execute('device_add', device);
}

/**
 * Plugs back in a running guest's shares that a capture unplugged, as many as were (one that
 * was not is refused by QEMU as a duplicate id, and left as it is).
 */
export async function replugShares(qmp: QmpClient, mounts: Mount[]): Promise<void> {
  for (const device of sharesToAdd(mounts)) await qmp.execute('device_add', device).catch(() => undefined);
}

/**
 * Unplugs a VM's `count` shares before it is saved, its guest having let go of them: each
 * `device_del`, then every `DEVICE_DELETED`, which comes once the guest has ejected it. Throws when
 * the guest does not within `timeoutMs` (the save is then given up).
 */
export async function unplugShares(qmp: QmpClient, count: number, timeoutMs = UNPLUG_TIMEOUT_MS): Promise<void> {
  const ids = new Set(Array.from({ length: count }, (_, i) => shareId(i)));
  let end: (err?: Error) => void = () => undefined;
  const gone = new Promise<void>((resolve, reject) => {
    const on = (e: QmpEvent) => {
      const id = (e.data as { device?: string } | undefined)?.device;
      if (e.event === 'DEVICE_DELETED' && id && ids.delete(id) && !ids.size) end();
    };
    const closed = () => end(new Error('qemu went away while its shares were unplugged'));
    const timer = setTimeout(
      () => end(new Error(`the guest did not give back its shares (${[...ids].join(', ')}) within ${timeoutMs} ms`)),
      timeoutMs,
    );
    end = (err) => {
      clearTimeout(timer);
      qmp.off('event', on);
      qmp.off('close', closed);
      if (err) reject(err);
      else resolve();
    };
    qmp.on('event', on);
    qmp.on('close', closed);
  });
  // Its end may come (a timeout, QEMU gone) while a device_del is still on its way.
  gone.catch(() => undefined);
  try {
    for (const id of [...ids]) await qmp.execute('device_del', { id });
  } catch (err) {
    end(err as Error);
  }
  await gone;
}
