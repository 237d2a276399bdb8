import type { Config } from '../../app/config.js';
import type { Failpoints } from '../../ports/failpoints.js';
import type { GuestAgent } from '../../ports/guest-agent.js';
import type { GuestNetwork } from '../../ports/guest-network.js';
import type { CloneSpeedUps } from '../../ports/clone-speed-ups.js';
import type { HypervisorAdapter } from '../../ports/hypervisor.js';
import type { Logger } from '../../ports/logger.js';
import type { SshProbe } from '../../ports/tunnels.js';

/**
 * How the daemon makes one kind of hypervisor from config. Adding a hypervisor means a folder
 * beside `qemu/` and `fake/` with a driver, and one line in the composition root's table.
 */
export interface HypervisorDriver {
  /** `failpoints`: steps inside the adapter where a test may make the daemon die (test_mode). */
  create(config: Config, log: Logger, failpoints: Failpoints): HypervisorAdapter;
}

/** Guest-side adapters that answer for VMs with no real guest behind them (the fake without agents). */
export interface GuestStandIns {
  guestAgent: GuestAgent;
  sshProbe: SshProbe;
}

/**
 * An adapter whose VMs may have no guest offers stand-ins for the guest agent and SSH probe;
 * every other adapter's guests are reached over HTTP and SSH.
 */
export function standInsOf(hv: HypervisorAdapter): GuestStandIns | undefined {
  const offer = (hv as Partial<{ guestStandIns(): GuestStandIns | undefined }>).guestStandIns;
  return typeof offer === 'function' ? offer.call(hv) : undefined;
}

/** The guests' networks an adapter runs (QEMU's in svc-netd); undefined when its VMs have none to police. */
export function networkOf(hv: HypervisorAdapter): GuestNetwork | undefined {
  const offer = (hv as Partial<{ guestNetwork(): GuestNetwork | undefined }>).guestNetwork;
  return typeof offer === 'function' ? offer.call(hv) : undefined;
}

/** The work an adapter does ahead of clones, when it has any (QEMU's spare QEMUs). */
export function speedUpsOf(hv: HypervisorAdapter): CloneSpeedUps | undefined {
  const s = hv as Partial<CloneSpeedUps>;
  return typeof s.cloneReady === 'function' && typeof s.warmWith === 'function' ? (hv as unknown as CloneSpeedUps) : undefined;
}
