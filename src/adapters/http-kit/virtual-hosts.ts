import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';

/** Other sites on the daemon's listeners, by Host: asked first for every request (`owns`). */
export interface VirtualHosts {
  owns(req: IncomingMessage): boolean;
  request(req: IncomingMessage, res: ServerResponse): void;
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
}
