/**
 * A push-to-pull bridge: a producer pushes events, any number of reads consume them as an
 * AsyncIterable. The producer runs on its own, so a consumer that stops reading (a client gone
 * away) does not stop the work.
 */
export class AsyncQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private waiters: (() => void)[] = [];
  private closed = false;

  push(item: T): void {
    this.items.push(item);
    this.wake();
  }

  close(): void {
    this.closed = true;
    this.wake();
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      while (this.items.length > 0) yield this.items.shift() as T;
      if (this.closed) return;
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }
}

/** What every progress event of a long call (a create, an image build) says. */
interface Progress {
  phase: string;
  message: string;
  name: string;
  t: string;
  elapsed_ms: number;
}

/**
 * An emitter of one call's progress into `queue`: each event its phase, message and what the
 * phase adds, stamped with the call's `name`, the time and the time since `t0` (when it was accepted).
 */
export function progressEmitter<E extends Progress>(queue: AsyncQueue<E>, now: () => number, name: string, t0: number) {
  return (phase: E['phase'], message: string, extra: Partial<E> = {}): void =>
    queue.push({ phase, message, name, t: new Date(now()).toISOString(), elapsed_ms: now() - t0, ...extra } as E);
}
