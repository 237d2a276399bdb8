import type { Duplex } from 'node:stream';

/** Pipes two connections into each other; either one's end, close or error ends both. */
export function joinStreams(a: Duplex, b: Duplex): void {
  const end = () => {
    a.destroy();
    b.destroy();
  };
  a.on('error', end).on('close', end);
  b.on('error', end).on('close', end);
  a.pipe(b);
  b.pipe(a);
}
