import type { ContainerModule } from 'inversify';
import type { Config, ConfigSection } from '../../app/config.js';
import type { CloneSpeedUps } from '../../ports/clone-speed-ups.js';
import type { GuestAgent } from '../../ports/guest-agent.js';
import type { GuestNetwork } from '../../ports/guest-network.js';
import type { HypervisorAdapter } from '../../ports/hypervisor-adapter.js';
import type { SshProbe } from '../../ports/tunnels.js';

/**
 * A hypervisor driver: one folder (`qemu/`, `fake/`, `cloud-hypervisor/`) that brings its config
 * section, and a container module binding what its VMs need: the hypervisor ports (Hypervisor,
 * VmDisks, GuestImages, HostLinks), the way to reach their agents (GuestAgent, over the driver's own
 * transport) and their SSH (SshProbe), their networks (GuestNetwork) and, if it has any, the work
 * it does ahead of clones (CloneSpeedUps). Adding a driver is a folder and a line in `drivers.ts`.
 * The core (Logger, Failpoints, AppConfig) is bound before its module loads.
 */
export interface HypervisorDriver {
  /** The config's `hypervisor` value that selects it. */
  readonly name: string;
  /** Its own keys (`qemu: {binary: ...}` in the file; docs/config.md). */
  readonly section: ConfigSection;
  module(config: Config): ContainerModule;
}

/** Guest-side adapters that answer for VMs with no real guest behind them (the fake without agents). */
export interface GuestStandIns {
  guestAgent: GuestAgent;
  sshProbe: SshProbe;
}

/** An adapter whose VMs may have no guest offers stand-ins for the guest agent and SSH probe. */
export function standInsOf(hv: HypervisorAdapter): GuestStandIns | undefined {
  const offer = (hv as Partial<{ guestStandIns(): GuestStandIns | undefined }>).guestStandIns;
  return typeof offer === 'function' ? offer.call(hv) : undefined;
}

/** The guests' networks an adapter an embedder hands in runs (QEMU's in svc-netd), if any. */
export function networkOf(hv: HypervisorAdapter): GuestNetwork | undefined {
  const offer = (hv as Partial<{ guestNetwork(): GuestNetwork | undefined }>).guestNetwork;
  return typeof offer === 'function' ? offer.call(hv) : undefined;
}

/** The work an adapter an embedder hands in does ahead of clones, if it has any (QEMU's spare QEMUs). */
export function speedUpsOf(hv: HypervisorAdapter): CloneSpeedUps | undefined {
  const s = hv as Partial<CloneSpeedUps>;
  return typeof s.cloneReady === 'function' && typeof s.warmWith === 'function'
    ? (hv as unknown as CloneSpeedUps)
    : undefined;
}
