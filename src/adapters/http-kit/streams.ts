import type { ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';

/**
 * Calls `fn` once the caller's connection is gone before its answer finished. A caller that left
 * while the answer was being made (the handler awaited the guest, say) is gone already: its
 * `close` has fired and will not fire again, so `fn` runs at once. Returns a function that stops
 * listening.
 */
export function onceGone(res: ServerResponse, fn: () => void): () => void {
  const closed = () => {
    if (!res.writableFinished) fn();
  };
  if (res.closed || res.destroyed) {
    closed();
    return () => undefined;
  }
  res.once('close', closed);
  return () => res.off('close', closed);
}

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

/**
 * Answers an upgrade with 101 (`Upgrade: protocol`) and joins the client to `target`: what came
 * after the request's head is passed on first. A client gone meanwhile lets the target go.
 */
export function spliceUpgrade(client: Duplex, head: Buffer, target: Duplex, protocol: string): void {
  if (client.destroyed) return void target.destroy();
  client.write(`HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${protocol}\r\n\r\n`);
  if (head.length) target.write(head);
  joinStreams(client, target);
}
