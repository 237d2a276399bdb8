import { createRequire } from 'node:module';
import { hostname } from 'node:os';

/** The system calls of an identity, made in the agent's own process. */
export interface SysCalls {
  /** The wall clock, in milliseconds since the epoch (settimeofday). */
  setTime(ms: number): void;
  /** The kernel's hostname (sethostname). */
  setHostname(name: string): void;
  /** The kernel's hostname as it is. */
  hostname(): string;
  /**
   * Credits `bytes` to the kernel's entropy pool and reseeds its generator at once (RNDADDENTROPY,
   * RNDRESEEDCRNG); absent from an addon built before it.
   */
  reseed?(bytes: Buffer): void;
}

/** What the addon itself exports: the calls; the hostname is read through node:os. */
type Addon = Omit<SysCalls, 'hostname'>;

/**
 * The `svc-sys` addon (native/svc-sys.c, built by scripts/build-agent.mjs into the agent's
 * node_modules, beside the bundle in a guest), or null when it is not there or does not load: the
 * agent then sets the clock with `date` in its kept shell. `from` names another place (tests).
 */
export function loadSysCalls(from = 'svc-sys'): SysCalls | null {
  let addon: Partial<Addon>;
  try {
    addon = createRequire(import.meta.url)(from) as Partial<Addon>;
  } catch {
    return null;
  }
  if (typeof addon.setTime !== 'function' || typeof addon.setHostname !== 'function') return null;
  const { setTime, setHostname, reseed } = addon;
  return {
    setTime: (ms) => setTime(ms),
    setHostname: (name) => setHostname(name),
    hostname,
    ...(typeof reseed === 'function' ? { reseed: (b: Buffer) => reseed(b) } : {}),
  };
}
