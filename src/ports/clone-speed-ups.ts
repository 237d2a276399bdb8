import type { AgentEndpoint } from './guest-agent.js';
import type { VmRef } from './hypervisor.js';

export const CloneSpeedUps = Symbol('CloneSpeedUps');
/**
 * Work a hypervisor driver does ahead of clones (QEMU's: a spare process started for a template's
 * next clone, its guest restored and run once). An optional capability: only a driver that has
 * such work binds it, and the use cases only tell it when to start and what a guest may run.
 */
export interface CloneSpeedUps {
  /** A clone has answered: the work ahead of its template's next clone may start now. A hint; idempotent. */
  cloneReady(clone: VmRef): void;
  /**
   * The calls a guest restored ahead of a clone may run before it waits, so that a clone's first
   * answer and first command find their paths run once (the driver's config decides whether it
   * uses them). The last call wins; undefined turns them off.
   */
  warmWith(calls: GuestWarmUpCalls | undefined): void;
}

/** What the first moments of a restored guest run: each rejects when the guest does not answer. */
export interface GuestWarmUpCalls {
  /** A clone's first answer (its identity), under the guest's own `name`. */
  firstAnswer(agent: AgentEndpoint, name: string): Promise<void>;
  /** A clone's first command. */
  firstCommand(agent: AgentEndpoint): Promise<void>;
}
