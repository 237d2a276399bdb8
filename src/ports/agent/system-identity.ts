import type { GuestIdentity } from '../../domain/agent.js';

export const SystemIdentity = Symbol('SystemIdentity');
/** Applies an identity to the guest system: hostname, /etc/hostname, /etc/machine-id, the clock. */
export interface SystemIdentity {
  apply(id: GuestIdentity): Promise<void>;
}
