import type { EgressSecretBinding } from '../../domain/egress-secrets.js';
import type { EgressEvent, EgressPolicy } from '../../domain/egress.js';
import type { GuestNetwork } from '../../ports/guest-network.js';
import type { VmRef } from '../../ports/hypervisor.js';

/**
 * Guest networks where no guest has one (the fake hypervisor): policies are only remembered, and
 * the log holds what a test `emit`s.
 */
export class InMemoryGuestNetwork implements GuestNetwork {
  readonly policies = new Map<string, EgressPolicy>();
  private readonly events: EgressEvent[] = [];
  private readonly listeners = new Set<(e: EgressEvent) => void>();

  async setPolicy(vm: VmRef, policy: EgressPolicy): Promise<void> {
    this.policies.set(vm.name, policy);
  }

  /** The egress secrets each VM has (tests). */
  readonly secrets = new Map<string, EgressSecretBinding[]>();

  async setSecrets(vm: VmRef, bindings: EgressSecretBinding[]): Promise<{ ca_pem?: string }> {
    this.secrets.set(vm.name, bindings);
    return bindings.length
      ? { ca_pem: `-----BEGIN CERTIFICATE-----\nfake CA of ${vm.name}\n-----END CERTIFICATE-----\n` }
      : {};
  }

  async log(vm: VmRef, query: { limit: number; sinceMs?: number }): Promise<EgressEvent[]> {
    const since = query.sinceMs;
    return this.events
      .filter((e) => e.vm === vm.name && (since === undefined || Date.parse(e.t) >= since))
      .slice(-query.limit);
  }

  watch(listener: (e: EgressEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** A decision, as a guest's network would report it (tests). */
  emit(e: EgressEvent): void {
    this.events.push(e);
    for (const l of this.listeners) l(e);
  }
}
