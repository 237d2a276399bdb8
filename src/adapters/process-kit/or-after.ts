/**
 * `p`'s value, or `fallback` once `ms` have passed without it: for waits that give up (a QEMU
 * that should be gone, an answer that may come early). The timer is cleared when `p` settles
 * first and never holds the process open. A rejection of `p` before the time is passed on.
 */
export async function orAfter<T, F>(p: Promise<T>, ms: number, fallback: F): Promise<T | F> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<F>((resolve) => {
    timer = setTimeout(() => resolve(fallback), ms);
    timer.unref();
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}
