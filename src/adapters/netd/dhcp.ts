/**
 * A DHCP server for one client (RFC 2131): whatever it asks, it is offered the guest's address,
 * the gateway and the resolver, as QEMU's user-mode network does, so images that configure their
 * network by DHCP (cloud images) and those with it written in (the project's own) agree.
 */

const COOKIE = 0x63825363;
const DISCOVER = 1;
const OFFER = 2;
const REQUEST = 3;
const ACK = 5;

export interface DhcpLease {
  client: number;
  gateway: number;
  dns: number;
  mask: number;
  leaseSec: number;
}

export interface DhcpRequest {
  xid: number;
  chaddr: Buffer;
  flags: number;
  type: number;
}

export function readDhcp(b: Buffer): DhcpRequest | undefined {
  if (b.length < 240 || b[0] !== 1 || b.readUInt32BE(236) !== COOKIE) return undefined;
  let type = 0;
  for (let i = 240; i < b.length;) {
    const code = b[i];
    if (code === 255) break;
    if (code === 0) {
      i++;
      continue;
    }
    if (i + 1 >= b.length) break;
    const len = b[i + 1];
    if (code === 53 && len === 1 && i + 2 < b.length) type = b[i + 2];
    i += 2 + len;
  }
  return { xid: b.readUInt32BE(4), chaddr: Buffer.from(b.subarray(28, 34)), flags: b.readUInt16BE(10), type };
}

/** The answer to a DISCOVER (an offer) or a REQUEST (an ack); nothing for the rest (release, decline). */
export function dhcpReply(req: DhcpRequest, lease: DhcpLease): Buffer | undefined {
  const type = req.type === DISCOVER ? OFFER : req.type === REQUEST ? ACK : 0;
  if (!type) return undefined;
  const b = Buffer.alloc(300);
  b[0] = 2; // BOOTREPLY
  b[1] = 1;
  b[2] = 6;
  b.writeUInt32BE(req.xid, 4);
  b.writeUInt16BE(req.flags, 10);
  b.writeUInt32BE(lease.client >>> 0, 16); // yiaddr
  b.writeUInt32BE(lease.gateway >>> 0, 20); // siaddr
  req.chaddr.copy(b, 28);
  b.writeUInt32BE(COOKIE, 236);
  let i = 240;
  const opt = (code: number, data: number[] | Buffer) => {
    b[i] = code;
    b[i + 1] = data.length;
    Buffer.from(data).copy(b, i + 2);
    i += 2 + data.length;
  };
  const ip = (n: number) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255];
  opt(53, [type]);
  opt(54, ip(lease.gateway));
  opt(51, ip(lease.leaseSec));
  opt(1, ip(lease.mask));
  opt(3, ip(lease.gateway));
  opt(6, ip(lease.dns));
  b[i] = 255;
  return b;
}
