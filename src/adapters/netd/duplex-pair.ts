import { Duplex } from 'node:stream';

/**
 * Two streams joined back to back, in memory: what one is written the other reads (with
 * back-pressure), ending one ends the other's reading, and destroying one destroys both (a reset
 * reaches the far side). Node 22 has `stream.duplexPair`; this is the same for Node 20.
 */
export function duplexPair(): [Duplex, Duplex] {
  const ends: Duplex[] = [];
  const waiting: (((err?: Error | null) => void) | undefined)[] = [undefined, undefined];
  const make = (me: number) => {
    const peer = () => ends[1 - me];
    return new Duplex({
      read() {
        // The peer's writer waits for this side to want more.
        const cb = waiting[1 - me];
        waiting[1 - me] = undefined;
        cb?.();
      },
      write(chunk: Buffer, _enc, cb) {
        if (peer().destroyed) return cb(new Error('the other end is closed'));
        if (peer().push(chunk)) cb();
        else waiting[me] = cb;
      },
      final(cb) {
        peer().push(null);
        cb();
      },
      destroy(err, cb) {
        const w = waiting[me];
        waiting[me] = undefined;
        w?.(err ?? new Error('closed'));
        if (!peer().destroyed) peer().destroy();
        cb(err);
      },
    });
  };
  ends.push(make(0), make(1));
  return [ends[0], ends[1]];
}
