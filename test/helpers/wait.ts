/** How long a wait lasts and how often it asks (ms). */
export interface WaitOptions {
  /** The longest wait (10 s). */
  ms?: number;
  /** The pause between two asks (50 ms). */
  every?: number;
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Asks `ok` until it holds or `ms` has passed, and says which: the caller's `expect` on the same
 * state then fails with its own message. A check that throws counts as not yet (a node starting, a
 * file not written yet); the last such error is what `waitUntil` names.
 */
export async function poll(ok: () => boolean | Promise<boolean>, opts: WaitOptions = {}): Promise<boolean> {
  return (await attempt(ok, opts)).ok;
}

/** As `poll`, and fails naming `what` (and a check's last error) when the time passes first. */
export async function waitUntil(
  what: string,
  ok: () => boolean | Promise<boolean>,
  opts: WaitOptions = {},
): Promise<void> {
  const r = await attempt(ok, opts);
  if (r.ok) return;
  const why = r.error ? ` (last: ${r.error.message})` : '';
  throw new Error(`not so within ${opts.ms ?? 10_000} ms: ${what}${why}`);
}

async function attempt(
  ok: () => boolean | Promise<boolean>,
  { ms = 10_000, every = 50 }: WaitOptions,
): Promise<{ ok: boolean; error?: Error }> {
  const end = Date.now() + ms;
  let error: Error | undefined;
  for (;;) {
    try {
      if (await ok()) return { ok: true };
      error = undefined;
    } catch (err) {
      error = err as Error;
    }
    if (Date.now() >= end) return { ok: false, error };
    await pause(every);
  }
}
