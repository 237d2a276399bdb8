import { DRIVER_SECTIONS } from './driver-sections.js';
import type { HypervisorDriver } from './driver.js';
import { fakeDriver } from './fake/fake-driver.js';
import { qemuDriver } from './qemu/qemu-driver.js';
import { chDriver } from './cloud-hypervisor/ch-driver.js';

/** The hypervisor drivers this daemon has, by the config's `hypervisor`. */
export const DRIVERS: Readonly<Record<string, HypervisorDriver>> = Object.fromEntries(
  [qemuDriver, fakeDriver, chDriver].map((d) => [d.name, d]),
);

export { DRIVER_SECTIONS };

// Each driver reads the section driver-sections.ts names for it.
for (const d of Object.values(DRIVERS))
  if (!DRIVER_SECTIONS.includes(d.section))
    throw new Error(`driver ${d.name}: its config section is not in DRIVER_SECTIONS`);
