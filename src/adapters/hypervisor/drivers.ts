import type { ConfigSection } from '../../app/config.js';
import type { HypervisorDriver } from './driver.js';
import { fakeDriver } from './fake/fake-driver.js';
import { qemuDriver } from './qemu/qemu-driver.js';
import { chDriver } from './cloud-hypervisor/ch-driver.js';

/** The hypervisor drivers this daemon has, by the config's `hypervisor`. */
export const DRIVERS: Readonly<Record<string, HypervisorDriver>> = Object.fromEntries(
  [qemuDriver, fakeDriver, chDriver].map((d) => [d.name, d]),
);

/** Every driver's config section (the config is read with them). */
export const DRIVER_SECTIONS: readonly ConfigSection[] = Object.values(DRIVERS).map((d) => d.section);
