import { createServer } from 'node:net';
import { createSocket } from 'node:dgram';

/** A free loopback port, found by binding port 0. Callers retry if it is taken before they use it. */
export function freePort(proto: 'tcp' | 'udp' = 'tcp'): Promise<number> {
  if (proto === 'udp') {
    return new Promise((resolve, reject) => {
      const s = createSocket('udp4');
      s.once('error', reject);
      s.bind(0, '127.0.0.1', () => {
        const { port } = s.address();
        s.close(() => resolve(port));
      });
    });
  }
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** Can this loopback port be bound right now? */
export function portFree(port: number, proto: 'tcp' | 'udp'): Promise<boolean> {
  return new Promise((resolve) => {
    if (proto === 'udp') {
      const s = createSocket('udp4');
      s.once('error', () => resolve(false));
      s.bind(port, '127.0.0.1', () => s.close(() => resolve(true)));
      return;
    }
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}
