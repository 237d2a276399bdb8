import type { GuestImages } from './guest-images.js';
import type { HostLinks, Hypervisor, VmDisks } from './hypervisor.js';

/** One adapter that offers every hypervisor capability (what an embedder may hand the daemon). */
export type HypervisorAdapter = Hypervisor & VmDisks & GuestImages & HostLinks;
