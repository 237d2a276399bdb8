import type { IncomingMessage } from 'node:http';
import { connect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { parseGuestPort, PORT_UPGRADE } from '../../domain/agent.js';
import { InvalidArgumentError, NotFoundError } from '../../domain/errors.js';
import { spliceUpgrade } from '../http-kit/streams.js';
import { rejectUpgrade, requestUrl } from '../http-kit/terminal-socket.js';

/** How long the agent waits for a guest port to accept. */
const CONNECT_MS = 5_000;

/**
 * The agent's side of PORT_PATH: connects to the asked port on the guest's loopback (127.0.0.1,
 * then ::1, so a server bound to either or to every address is reached), answers 101 and joins the
 * two connections until either ends. A port nothing listens on is a 404 that says so.
 */
export function upgradeToPort(req: IncomingMessage, socket: Duplex, head: Buffer): void {
  socket.on('error', () => socket.destroy());
  const url = requestUrl(req);
  if (String(req.headers.upgrade ?? '').toLowerCase() !== PORT_UPGRADE)
    return rejectUpgrade(socket, new InvalidArgumentError(`a port is opened with Upgrade: ${PORT_UPGRADE}`));
  let port: number;
  try {
    port = parseGuestPort(url.searchParams.get('port') ?? '');
  } catch (err) {
    return rejectUpgrade(socket, err);
  }
  void reach(port).then(
    (guest) => spliceUpgrade(socket, head, guest, PORT_UPGRADE),
    (err: Error) => rejectUpgrade(socket, err),
  );
}

async function reach(port: number): Promise<Socket> {
  try {
    return await open('127.0.0.1', port);
  } catch (first) {
    return open('::1', port).catch(() => {
      throw (first as NodeJS.ErrnoException).code === 'ECONNREFUSED'
        ? new NotFoundError(`nothing listens on port ${port} in the guest`)
        : new NotFoundError(`port ${port} in the guest cannot be reached: ${(first as Error).message}`);
    });
  }
}

function open(host: string, port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host, port, noDelay: true, timeout: CONNECT_MS });
    s.once('connect', () => {
      s.setTimeout(0);
      s.off('error', reject);
      resolve(s);
    });
    s.once('timeout', () => s.destroy(new Error(`no answer within ${CONNECT_MS} ms`)));
    s.once('error', reject);
  });
}
