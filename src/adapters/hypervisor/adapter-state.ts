import type { AdapterState } from '../../ports/hypervisor.js';

/** Wraps an adapter's own re-attach data as the opaque state the daemon keeps in the record. */
export function toState<T extends object>(data: T): AdapterState {
  return data as unknown as AdapterState;
}

/** Reads back what `toState` wrapped; a record from an older daemon may lack any field. */
export function fromState<T extends object>(state: AdapterState | undefined): Partial<T> {
  return (state ?? {}) as unknown as Partial<T>;
}
