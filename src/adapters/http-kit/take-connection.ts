import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** A request's connection taken from Node's HTTP server, and the body bytes the server had read of it. */
export interface TakenConnection {
  connection: Socket;
  pending: Buffer;
}

/**
 * Takes the request's connection from Node so that another reader (a splice helper) moves the
 * rest of its body: Node's reads of the socket stop (the HTTP server reads it natively; `reading`
 * stays set so nothing starts them again), what the server had read of the body comes along, and
 * the answer closes the connection, whose parser still waits for the body it never saw.
 * Undefined, with nothing taken, once the body has begun to flow through Node or when the socket
 * has no descriptor to hand over.
 */
export function takeConnection(req: IncomingMessage, res: ServerResponse): TakenConnection | undefined {
  const socket = req.socket;
  if (req.readableFlowing || req.readableEnded || req.complete || !stopReads(socket)) return undefined;
  const pending: Buffer[] = [];
  for (let c = req.read() as Buffer | null; c !== null; c = req.read() as Buffer | null) pending.push(c);
  res.shouldKeepAlive = false;
  res.setHeader('Connection', 'close');
  return { connection: socket, pending: Buffer.concat(pending) };
}

/** The body's declared length: its Content-Length when it is not chunked; undefined otherwise. */
export function declaredLength(req: IncomingMessage): number | undefined {
  const declared = req.headers['transfer-encoding'] === undefined ? req.headers['content-length'] : undefined;
  return declared !== undefined && /^\d{1,15}$/.test(declared) ? Number(declared) : undefined;
}

/**
 * Stops Node's reads of `socket` (libuv's too, `reading` left set so nothing starts them again);
 * false, with nothing done, when it has no descriptor to hand over. Call it again after a helper
 * was spawned with the socket: spawning clears `reading`, and a resume already on its way (a
 * read of the stream asks the socket for more) would then start Node reading beside the helper.
 */
export function stopReads(socket: Socket): boolean {
  const handle = (socket as Socket & { _handle?: { fd?: number; readStop?: () => number; reading?: boolean } })._handle;
  if (typeof handle?.readStop !== 'function' || !(typeof handle.fd === 'number' && handle.fd >= 0)) return false;
  socket.pause();
  handle.readStop();
  handle.reading = true;
  return true;
}
