import type { GuestIdentity } from '../../domain/agent.js';

export const SystemIdentity = Symbol('SystemIdentity');
/**
 * Gives the guest an identity (hostname, /etc/hostname, /etc/machine-id, the clock, a clone's
 * overlay address) and records it as notes in `notes`, a directory of one file per field
 * (`hostname`, `time_ms`, `machine_id`), written without fsync: a record, not state.
 */
export interface SystemIdentity {
  apply(id: GuestIdentity, notes: string): Promise<void>;
}
