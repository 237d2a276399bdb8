import { injectable } from 'inversify';
import type { InstanceRecord } from '../domain/instance.js';

export type LifecycleEvent = 'up' | 'down' | 'removed' | 'claimed';
type Listener = (record: InstanceRecord) => Promise<void> | void;

/**
 * Lets other services follow VMs without the instance service knowing them: `up` when a VM has
 * just become running (create, start, restore, reattach), `down` when its process stops
 * (shutdown, suspend, crash), `removed` when it is gone, `claimed` when a
 * warm pool member was handed out. Listener failures are reported, not thrown.
 */
@injectable()
export class LifecycleEvents {
  private readonly listeners = new Map<LifecycleEvent, Listener[]>();

  on(event: LifecycleEvent, listener: Listener): void {
    this.listeners.set(event, [...(this.listeners.get(event) ?? []), listener]);
  }

  async emit(event: LifecycleEvent, record: InstanceRecord): Promise<Error[]> {
    const errors: Error[] = [];
    for (const l of this.listeners.get(event) ?? []) {
      try {
        await l(record);
      } catch (err) {
        errors.push(err as Error);
      }
    }
    return errors;
  }
}
