import { connect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { SocksClient } from 'socks';
import { proxyHostPort, type EgressProxy } from '../../domain/egress.js';
import { duplexPair } from './duplex-pair.js';

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

/**
 * Connections to one target through a VM's proxy, its password read from the host secret at each
 * dial (a rotated secret is used from the next connection on; a missing one fails the dial).
 */
export class ProxyDialer {
  constructor(
    private readonly proxy: EgressProxy,
    private readonly target: SocksTarget,
    private readonly secretValue: ((name: string) => Promise<Buffer | undefined>) | undefined,
    private readonly timeoutMs: number,
  ) {}

  async dial(started?: (s: Socket) => void): Promise<Socket> {
    const { proxy } = this;
    const v = proxy.secret ? await this.secretValue?.(proxy.secret) : undefined;
    if (proxy.secret && !v)
      throw new Error(`SOCKS5 proxy ${proxy.address}: its password, host secret ${proxy.secret}, is not there`);
    return dialSocks(proxy, v?.toString('utf8'), this.target, this.timeoutMs, started);
  }

  /** A connection returned at once: what is written to it waits until the proxy has connected. */
  reopen(): Duplex {
    const [mine, theirs] = duplexPair();
    this.dial().then(
      (sock) => {
        if (theirs.destroyed) return void sock.destroy();
        theirs.pipe(sock).pipe(theirs);
        // Either end going (a reset included, which ends no pipe) takes the other with it.
        sock.on('error', () => undefined);
        sock.on('close', () => theirs.destroy());
        theirs.on('close', () => sock.destroy());
      },
      // The error goes to the end a client reads (a TLS socket or an HTTP agent over it), which
      // fails its request; the other end just closes.
      (err: Error) => mine.destroy(err),
    );
    theirs.on('error', () => undefined);
    return mine;
  }
}
