import type { EgressSecretBinding } from '../domain/egress-secrets.js';
import type { EgressEvent, EgressPolicy } from '../domain/egress.js';
import type { VmRef } from './hypervisor.js';

export const GuestNetwork = Symbol('GuestNetwork');
/**
 * The guests' networks as the use cases see them: each VM's egress policy at work, and the log
 * of what its guest reached. The hypervisor adapter attaches a VM's network when it starts it
 * (VmSpec.egress); this port changes a running VM's policy and reads what happened.
 */
export interface GuestNetwork {
  /**
   * Replaces the policy of a VM whose network is up: new connections follow it at once, and open
   * ones it forbids are closed. A VM without a network now (stopped) resolves: its next start
   * takes the policy from its spec. Idempotent. InternalError when the network process fails.
   */
  setPolicy(vm: VmRef, policy: EgressPolicy): Promise<void>;

  /**
   * Puts a running VM's egress secrets to work (none: off): requests to their hosts get the values
   * in place of the placeholders (docs/egress-secrets.md). Resolves with the VM's CA certificate
   * (made with the VM's first binding, kept in its directory), none without bindings; a VM
   * without a network now resolves `{}` (its next start sets them). Idempotent.
   */
  setSecrets(vm: VmRef, bindings: EgressSecretBinding[]): Promise<{ ca_pem?: string }>;

  /** The VM's egress log, oldest first: the last `limit` entries at or after `sinceMs`. Idempotent. */
  log(vm: VmRef, query: { limit: number; sinceMs?: number }): Promise<EgressEvent[]>;

  /** Every egress decision of every VM as it happens. Returns the unsubscribe. */
  watch(listener: (e: EgressEvent) => void): () => void;
}
