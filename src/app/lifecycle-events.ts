import { inject, injectable } from 'inversify';
import type { VmRecord } from '../domain/vm.js';

export type LifecycleEvent = 'up' | 'down' | 'removed' | 'claimed';

export const LifecycleContribution = Symbol('LifecycleContribution');
/**
 * A service that follows VMs: `up` when a VM has just become running (create, start, restore,
 * re-attach), `down` when its process stops (shutdown, suspend, crash), `removed` when it is gone,
 * `claimed` when a warm pool member was handed out. Bound as a multi-binding in the composition
 * root (who reacts to what is written down there); called in binding order. A handler may be
 * async: the one who emits waits for it.
 */
export interface LifecycleContribution {
  onUp?(record: VmRecord): Promise<void> | void;
  onDown?(record: VmRecord): Promise<void> | void;
  onRemoved?(record: VmRecord): Promise<void> | void;
  onClaimed?(record: VmRecord): Promise<void> | void;
}

export const LifecycleContributions = Symbol('LifecycleContributions');
/** Every LifecycleContribution, resolved when first asked for (the contributions depend on what emits). */
export type LifecycleContributions = () => LifecycleContribution[];

const HANDLER = { up: 'onUp', down: 'onDown', removed: 'onRemoved', claimed: 'onClaimed' } as const;

/**
 * Lets the services that follow VMs (LifecycleContribution) hear of them without the services that
 * change VMs knowing them. Handler failures are returned, not thrown.
 */
@injectable()
export class LifecycleEvents {
  private contributions: LifecycleContribution[] | undefined;

  constructor(@inject(LifecycleContributions) private readonly all: LifecycleContributions) {}

  async emit(event: LifecycleEvent, record: VmRecord): Promise<Error[]> {
    this.contributions ??= this.all();
    const errors: Error[] = [];
    for (const c of this.contributions) {
      const handler = c[HANDLER[event]];
      if (!handler) continue;
      // A follower that answers at once is called before the emitter goes on (no turn is yielded).
      try {
        const done = handler.call(c, record);
        if (done) await done;
      } catch (err) {
        errors.push(err as Error);
      }
    }
    return errors;
  }
}
