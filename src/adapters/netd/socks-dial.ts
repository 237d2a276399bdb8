import { connect, type Socket } from 'node:net';
import { SocksClient } from 'socks';
import { proxyHostPort, type EgressProxy } from '../../domain/egress.js';

/** Where a connection is to go, as the proxy is told: a name (resolved by the proxy) or an address. */
export interface SocksTarget {
  host: string;
  port: number;
}

/**
 * A connection to `target` through a SOCKS5 proxy (RFC 1928; RFC 1929 credentials when the proxy
 * has a username): the proxy's name is resolved now, and a name as the target is sent as one
 * (ATYP domain), for the proxy to resolve. Resolves with the socket once the proxy has connected,
 * ready for the target's bytes; rejects when the proxy cannot be reached, refuses the credentials
 * or the target, or says nothing within `timeoutMs`. There is no fallback to a direct connection.
 * `started` gets the socket to the proxy at once, so a caller can destroy it to call the dial off.
 */
export async function dialSocks(
  proxy: EgressProxy,
  password: string | undefined,
  target: SocksTarget,
  timeoutMs: number,
  started?: (sock: Socket) => void,
): Promise<Socket> {
  const at = proxyHostPort(proxy.address);
  const sock = connect({ host: at.host, port: at.port, allowHalfOpen: true });
  started?.(sock);
  let closed = () => {};
  const opened = new Promise<void>((resolve, reject) => {
    const fail = (err: Error) => reject(new Error(`SOCKS5 proxy ${proxy.address}: ${err.message}`));
    closed = () => fail(new Error('connection closed'));
    sock.once('error', fail);
    sock.once('close', closed);
    sock.once('connect', () => {
      sock.off('error', fail);
      resolve();
    });
  });
  const timer = setTimeout(() => sock.destroy(new Error(`no answer in ${timeoutMs} ms`)), timeoutMs);
  try {
    await opened;
    const { socket } = await SocksClient.createConnection({
      proxy: {
        host: at.host,
        port: at.port,
        type: 5,
        ...(proxy.username !== undefined ? { userId: proxy.username, password: password ?? '' } : {}),
      },
      command: 'connect',
      destination: { host: target.host, port: target.port },
      timeout: timeoutMs,
      existing_socket: sock,
    });
    sock.off('close', closed);
    return socket as Socket;
  } catch (err) {
    sock.destroy();
    const message = (err as Error).message;
    throw message.startsWith('SOCKS5 proxy') ? err : new Error(`SOCKS5 proxy ${proxy.address}: ${message}`);
  } finally {
    clearTimeout(timer);
  }
}
