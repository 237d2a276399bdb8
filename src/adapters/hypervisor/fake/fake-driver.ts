import type { HypervisorDriver } from '../driver.js';
import { InMemoryHypervisor } from './in-memory-hypervisor.js';
import { startLocalGuest } from './local-guest.js';

/** `hypervisor: fake`: in-memory VMs; with `fake_agent`, each runs a real local svc-agent and SSH server. */
export const fakeDriver: HypervisorDriver = {
  create: (config) => new InMemoryHypervisor({
    bootDelayMs: config.fake_boot_delay_ms, sidecar: config.fake_agent ? startLocalGuest : undefined,
  }),
};
