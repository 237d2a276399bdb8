/** How long a wait lasts and how often it asks (ms). */
export interface WaitOptions {
  /** The longest wait (10 s). */
  ms?: number;
  /** The pause between two asks (50 ms). */
  every?: number;
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `ok` as a check that has a value (true) once it holds. */
const holds = (ok: () => boolean | Promise<boolean>) => async () => ((await ok()) ? true : undefined);

/**
 * Asks `ok` until it holds or `ms` has passed, and says which: the caller's `expect` on the same
 * state then fails with its own message. A check that throws counts as not yet (a node starting, a
 * file not written yet); the last such error is what `waitFor` and `waitUntil` name.
 */
export async function poll(ok: () => boolean | Promise<boolean>, opts: WaitOptions = {}): Promise<boolean> {
  return (await attempt(holds(ok), opts)).value === true;
}

/** The first value `f` has (not undefined); fails naming `what` (and a check's last error) when the time passes first. */
export async function waitFor<T>(
  what: string,
  f: () => T | undefined | Promise<T | undefined>,
  opts: WaitOptions = {},
): Promise<T> {
  const r = await attempt(f, opts);
  if (r.value !== undefined) return r.value;
  const why = r.error ? ` (last: ${r.error.message})` : '';
  throw new Error(`not so within ${opts.ms ?? 10_000} ms: ${what}${why}`);
}

/** As `poll`, and fails as `waitFor` does when the time passes first. */
export async function waitUntil(
  what: string,
  ok: () => boolean | Promise<boolean>,
  opts: WaitOptions = {},
): Promise<void> {
  await waitFor(what, holds(ok), opts);
}

async function attempt<T>(
  f: () => T | undefined | Promise<T | undefined>,
  { ms = 10_000, every = 50 }: WaitOptions,
): Promise<{ value?: T; error?: Error }> {
  const end = Date.now() + ms;
  let error: Error | undefined;
  for (;;) {
    try {
      const value = await f();
      if (value !== undefined) return { value };
      error = undefined;
    } catch (err) {
      error = err as Error;
    }
    if (Date.now() >= end) return { error };
    await pause(every);
  }
}
