import { networkInterfaces } from 'node:os';

/** The host's first non-loopback IPv4 address (a "host address" a guest reaches only by a block rule). */
export function hostIp(): string {
  for (const list of Object.values(networkInterfaces()))
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  throw new Error('the host has no non-loopback IPv4 address');
}
