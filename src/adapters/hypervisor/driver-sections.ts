import type { ConfigSection } from '../../app/config.js';
import { CH_SECTION } from './cloud-hypervisor/ch-config.js';
import { FAKE_SECTION } from './fake/fake-config.js';
import { QEMU_SECTION } from './qemu/qemu-config.js';

/**
 * Every hypervisor driver's config section (the config is read with them), apart from the drivers
 * themselves: what reads a config file without running a hypervisor (the CLI, the client) loads
 * these, not the adapters behind them.
 */
export const DRIVER_SECTIONS: readonly ConfigSection[] = [QEMU_SECTION, FAKE_SECTION, CH_SECTION];
