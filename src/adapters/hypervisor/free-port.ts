import { createServer } from 'node:net';
import { createSocket } from 'node:dgram';

type Proto = 'tcp' | 'udp';

/** Binds loopback port 0 and keeps it bound until `release`. */
function hold(proto: Proto): Promise<{ port: number; release(): Promise<void> }> {
  return new Promise((resolve, reject) => {
    if (proto === 'udp') {
      const s = createSocket('udp4');
      s.once('error', reject);
      s.bind(0, '127.0.0.1', () =>
        resolve({ port: s.address().port, release: () => new Promise<void>((r) => s.close(() => r())) }),
      );
      return;
    }
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () =>
      resolve({
        port: (s.address() as { port: number }).port,
        release: () => new Promise<void>((r) => s.close(() => r())),
      }),
    );
  });
}

/** A free loopback port, found by binding port 0. Callers retry if it is taken before they use it. */
export async function freePort(proto: Proto = 'tcp'): Promise<number> {
  return (await freePorts([proto]))[0];
}

/**
 * Free loopback ports, one per entry and all different for a protocol: each stays bound until all
 * are found, because a port just closed can be the next one the kernel hands out (two forwards of
 * one VM on the same port make QEMU refuse to start). Ports in `avoid` (ones the caller chose
 * itself) are never returned. Callers retry if one is taken before they use it.
 */
export async function freePorts(protos: Proto[], avoid: ReadonlySet<number> = new Set()): Promise<number[]> {
  const held: { port: number; release(): Promise<void> }[] = [];
  const skipped: { release(): Promise<void> }[] = [];
  try {
    for (const proto of protos) {
      for (;;) {
        const h = await hold(proto);
        if (!avoid.has(h.port)) {
          held.push(h);
          break;
        }
        skipped.push(h);
      }
    }
    return held.map((h) => h.port);
  } finally {
    await Promise.all([...held, ...skipped].map((h) => h.release()));
  }
}

/** Can this loopback port be bound right now? */
export function portFree(port: number, proto: Proto): Promise<boolean> {
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
