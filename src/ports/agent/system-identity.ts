import type { GuestEgress, GuestIdentity } from '../../domain/agent.js';

export const SystemIdentity = Symbol('SystemIdentity');
/**
 * Gives the guest an identity (hostname, /etc/hostname, /etc/machine-id, the clock, a clone's
 * overlay address). An adapter that only stands in for a guest records it instead, as notes in
 * `notes`, a directory of one file per field (`hostname`, `time_ms`, `machine_id`), written without
 * fsync: a record, not state. An adapter that applies it to a system leaves `notes` alone.
 */
export interface SystemIdentity {
  /** `notes` is `<state-dir>/identity`; a userdata the identity carries is kept and marked in `<state-dir>`. */
  apply(id: GuestIdentity, notes: string): Promise<void>;
  /**
   * The VM's egress secrets (docs/egress-secrets.md): their placeholders in the environment of the
   * processes the agent starts, and (a real guest only) the VM's CA in the system's trust store.
   * Kept in `stateDir`; `resumeEgress` sets them again when the agent starts.
   */
  egress(e: GuestEgress, stateDir: string): Promise<void>;
  resumeEgress(stateDir: string): Promise<void>;
}
