/**
 * The frames a guest's NIC sends and receives, read and written by hand: Ethernet, ARP, IPv4,
 * ICMP, UDP and TCP. Every reader checks lengths against the buffer before it reads, so a frame a
 * guest made up can only be dropped (the caller catches what throws), never read past its end.
 */

export const ETH_IPV4 = 0x0800;
export const ETH_ARP = 0x0806;
export const IP_ICMP = 1;
export const IP_TCP = 6;
export const IP_UDP = 17;

export const TCP_FIN = 0x01;
export const TCP_SYN = 0x02;
export const TCP_RST = 0x04;
export const TCP_PSH = 0x08;
export const TCP_ACK = 0x10;

export class BadFrame extends Error {}

function need(b: Buffer, n: number, what: string): void {
  if (b.length < n) throw new BadFrame(`${what}: ${b.length} bytes, need ${n}`);
}

/** The Internet checksum's running sum over `b[start, end)` (RFC 1071), not yet folded. */
export function sum16(b: Buffer, start = 0, end = b.length, acc = 0): number {
  let s = acc;
  let i = start;
  for (; i + 1 < end; i += 2) s += (b[i] << 8) | b[i + 1];
  if (i < end) s += b[i] << 8;
  return s;
}

export function fold(s: number): number {
  while (s > 0xffff) s = (s & 0xffff) + Math.floor(s / 0x10000);
  return ~s & 0xffff;
}

export const macToString = (m: Buffer) => [...m].map((x) => x.toString(16).padStart(2, '0')).join(':');
export function macFrom(text: string): Buffer {
  return Buffer.from(text.split(':').map((h) => parseInt(h, 16)));
}
export const ipToString = (n: number) => `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
export function ipFrom(text: string): number {
  const p = text.split('.').map(Number);
  return ((p[0] << 24) | (p[1] << 16) | (p[2] << 8) | p[3]) >>> 0;
}

export interface EthFrame {
  dst: Buffer;
  src: Buffer;
  type: number;
  payload: Buffer;
}

export function readEth(b: Buffer): EthFrame {
  need(b, 14, 'ethernet');
  return { dst: b.subarray(0, 6), src: b.subarray(6, 12), type: b.readUInt16BE(12), payload: b.subarray(14) };
}

export interface Arp {
  op: number;
  senderMac: Buffer;
  senderIp: number;
  targetIp: number;
}

export function readArp(b: Buffer): Arp {
  need(b, 28, 'arp');
  if (b.readUInt16BE(0) !== 1 || b.readUInt16BE(2) !== ETH_IPV4 || b[4] !== 6 || b[5] !== 4)
    throw new BadFrame('arp: not ethernet/ipv4');
  return {
    op: b.readUInt16BE(6),
    senderMac: Buffer.from(b.subarray(8, 14)),
    senderIp: b.readUInt32BE(14),
    targetIp: b.readUInt32BE(24),
  };
}

/** An ARP frame (op 1 request, 2 reply) wrapped in Ethernet. */
export function arpFrame(op: number, srcMac: Buffer, srcIp: number, dstMac: Buffer, dstIp: number): Buffer {
  const f = Buffer.alloc(42);
  (op === 1 ? Buffer.alloc(6, 0xff) : dstMac).copy(f, 0);
  srcMac.copy(f, 6);
  f.writeUInt16BE(ETH_ARP, 12);
  f.writeUInt16BE(1, 14);
  f.writeUInt16BE(ETH_IPV4, 16);
  f[18] = 6;
  f[19] = 4;
  f.writeUInt16BE(op, 20);
  srcMac.copy(f, 22);
  f.writeUInt32BE(srcIp, 28);
  (op === 1 ? Buffer.alloc(6) : dstMac).copy(f, 32);
  f.writeUInt32BE(dstIp, 38);
  return f;
}

export interface Ipv4 {
  src: number;
  dst: number;
  proto: number;
  ttl: number;
  /** More fragments or a fragment offset: this packet is a piece of a larger one. */
  fragment: boolean;
  header: Buffer;
  payload: Buffer;
}

export function readIpv4(b: Buffer): Ipv4 {
  need(b, 20, 'ipv4');
  if (b[0] >> 4 !== 4) throw new BadFrame('ipv4: version');
  const ihl = (b[0] & 15) * 4;
  const total = b.readUInt16BE(2);
  if (ihl < 20 || total < ihl || total > b.length) throw new BadFrame('ipv4: lengths');
  const frag = b.readUInt16BE(6);
  return {
    src: b.readUInt32BE(12),
    dst: b.readUInt32BE(16),
    proto: b[9],
    ttl: b[8],
    fragment: (frag & 0x2000) !== 0 || (frag & 0x1fff) !== 0,
    header: b.subarray(0, ihl),
    payload: b.subarray(ihl, total),
  };
}

let ipId = 1;

/**
 * Writes Ethernet and IPv4 headers for a packet of `l4Len` bytes into the start of `f` (which has
 * room: 34 + l4Len bytes). Returns the offset of the layer-4 header.
 */
function ethIpHeader(
  f: Buffer,
  dstMac: Buffer,
  srcMac: Buffer,
  src: number,
  dst: number,
  proto: number,
  l4Len: number,
): number {
  dstMac.copy(f, 0);
  srcMac.copy(f, 6);
  f.writeUInt16BE(ETH_IPV4, 12);
  f[14] = 0x45;
  f[15] = 0;
  f.writeUInt16BE(20 + l4Len, 16);
  f.writeUInt16BE(ipId, 18);
  ipId = (ipId + 1) & 0xffff;
  f.writeUInt16BE(proto === IP_TCP ? 0x4000 : 0, 20); // TCP: don't fragment
  f[22] = 64;
  f[23] = proto;
  f.writeUInt16BE(0, 24);
  f.writeUInt32BE(src, 26);
  f.writeUInt32BE(dst, 30);
  f.writeUInt16BE(fold(sum16(f, 14, 34)), 24);
  return 34;
}

function pseudo(src: number, dst: number, proto: number, len: number): number {
  return (src >>> 16) + (src & 0xffff) + (dst >>> 16) + (dst & 0xffff) + proto + len;
}

export interface Link {
  dstMac: Buffer;
  srcMac: Buffer;
}

export interface Udp {
  srcPort: number;
  dstPort: number;
  payload: Buffer;
}

export function readUdp(b: Buffer): Udp {
  need(b, 8, 'udp');
  const len = b.readUInt16BE(4);
  if (len < 8 || len > b.length) throw new BadFrame('udp: length');
  return { srcPort: b.readUInt16BE(0), dstPort: b.readUInt16BE(2), payload: b.subarray(8, len) };
}

/** A UDP datagram in one frame (the caller fragments larger ones: `udpFrames`). */
function udpFrame(link: Link, src: number, srcPort: number, dst: number, dstPort: number, payload: Buffer): Buffer {
  const len = 8 + payload.length;
  const f = Buffer.allocUnsafe(34 + len);
  const o = ethIpHeader(f, link.dstMac, link.srcMac, src, dst, IP_UDP, len);
  f.writeUInt16BE(srcPort, o);
  f.writeUInt16BE(dstPort, o + 2);
  f.writeUInt16BE(len, o + 4);
  f.writeUInt16BE(0, o + 6);
  payload.copy(f, o + 8);
  const c = fold(sum16(f, o, o + len, pseudo(src, dst, IP_UDP, len)));
  f.writeUInt16BE(c === 0 ? 0xffff : c, o + 6);
  return f;
}

/**
 * A UDP datagram as the frames that carry it to a guest whose MTU is `mtu`: one, or IPv4
 * fragments (a DNS answer over EDNS may be larger than one frame).
 */
export function udpFrames(
  link: Link,
  src: number,
  srcPort: number,
  dst: number,
  dstPort: number,
  payload: Buffer,
  mtu: number,
): Buffer[] {
  const whole = udpFrame(link, src, srcPort, dst, dstPort, payload);
  if (whole.length - 14 <= mtu) return [whole];
  const data = whole.subarray(34); // UDP header and payload, checksummed
  const step = Math.floor((mtu - 20) / 8) * 8;
  const id = whole.readUInt16BE(18);
  const out: Buffer[] = [];
  for (let off = 0; off < data.length; off += step) {
    const piece = data.subarray(off, off + step);
    const f = Buffer.allocUnsafe(34 + piece.length);
    whole.copy(f, 0, 0, 34);
    f.writeUInt16BE(20 + piece.length, 16);
    f.writeUInt16BE(id, 18);
    f.writeUInt16BE((off + step < data.length ? 0x2000 : 0) | (off / 8), 20);
    f.writeUInt16BE(0, 24);
    f.writeUInt16BE(fold(sum16(f, 14, 34)), 24);
    piece.copy(f, 34);
    out.push(f);
  }
  return out;
}

export interface Icmp {
  type: number;
  code: number;
  rest: Buffer;
}

export function readIcmp(b: Buffer): Icmp {
  need(b, 8, 'icmp');
  return { type: b[0], code: b[1], rest: b.subarray(4) };
}

/** An ICMP message: an echo reply (type 0) or a destination unreachable (type 3) quoting `rest`. */
export function icmpFrame(link: Link, src: number, dst: number, type: number, code: number, rest: Buffer): Buffer {
  const len = 4 + rest.length;
  const f = Buffer.allocUnsafe(34 + len);
  const o = ethIpHeader(f, link.dstMac, link.srcMac, src, dst, IP_ICMP, len);
  f[o] = type;
  f[o + 1] = code;
  f.writeUInt16BE(0, o + 2);
  rest.copy(f, o + 4);
  f.writeUInt16BE(fold(sum16(f, o, o + len)), o + 2);
  return f;
}

/** ICMP destination unreachable, administratively prohibited (type 3 code 13), for `ip` the guest sent. */
export function prohibited(link: Link, from: number, ip: Ipv4): Buffer {
  const quoted = Buffer.concat([ip.header, ip.payload.subarray(0, 8)]);
  return icmpFrame(link, from, ip.src, 3, 13, Buffer.concat([Buffer.alloc(4), quoted]));
}

export interface Tcp {
  srcPort: number;
  dstPort: number;
  seq: number;
  ack: number;
  flags: number;
  window: number;
  /** From the SYN's options: the peer's maximum segment and its window scale (undefined: none). */
  mss?: number;
  wscale?: number;
  payload: Buffer;
}

export function readTcp(b: Buffer): Tcp {
  need(b, 20, 'tcp');
  const off = (b[12] >> 4) * 4;
  if (off < 20 || off > b.length) throw new BadFrame('tcp: data offset');
  const t: Tcp = {
    srcPort: b.readUInt16BE(0),
    dstPort: b.readUInt16BE(2),
    seq: b.readUInt32BE(4),
    ack: b.readUInt32BE(8),
    flags: b[13],
    window: b.readUInt16BE(14),
    payload: b.subarray(off),
  };
  if (t.flags & TCP_SYN) {
    for (let i = 20; i < off;) {
      const kind = b[i];
      if (kind === 0) break;
      if (kind === 1) {
        i++;
        continue;
      }
      if (i + 1 >= off) break;
      const len = b[i + 1];
      if (len < 2 || i + len > off) break;
      if (kind === 2 && len === 4) t.mss = b.readUInt16BE(i + 2);
      if (kind === 3 && len === 3) t.wscale = Math.min(b[i + 2], 14);
      i += len;
    }
  }
  return t;
}

export interface TcpOut {
  srcPort: number;
  dstPort: number;
  seq: number;
  ack: number;
  flags: number;
  window: number;
  /** On a SYN: our maximum segment and window scale. */
  mss?: number;
  wscale?: number;
}

/** A TCP segment with `payload[start, end)` as its data. */
export function tcpFrame(
  link: Link,
  src: number,
  dst: number,
  t: TcpOut,
  payload?: Buffer,
  start = 0,
  end = payload?.length ?? 0,
): Buffer {
  const opts = t.mss !== undefined ? (t.wscale !== undefined ? 8 : 4) : 0;
  const hl = 20 + opts;
  const len = hl + (end - start);
  const f = Buffer.allocUnsafe(34 + len);
  const o = ethIpHeader(f, link.dstMac, link.srcMac, src, dst, IP_TCP, len);
  f.writeUInt16BE(t.srcPort, o);
  f.writeUInt16BE(t.dstPort, o + 2);
  f.writeUInt32BE(t.seq >>> 0, o + 4);
  f.writeUInt32BE(t.ack >>> 0, o + 8);
  f[o + 12] = (hl / 4) << 4;
  f[o + 13] = t.flags;
  f.writeUInt16BE(Math.min(0xffff, Math.max(0, t.window)), o + 14);
  f.writeUInt32BE(0, o + 16); // checksum, urgent pointer
  if (opts) {
    f[o + 20] = 2;
    f[o + 21] = 4;
    f.writeUInt16BE(t.mss!, o + 22);
    if (t.wscale !== undefined) {
      f[o + 24] = 1;
      f[o + 25] = 3;
      f[o + 26] = 3;
      f[o + 27] = t.wscale;
    }
  }
  if (payload && end > start) payload.copy(f, o + hl, start, end);
  f.writeUInt16BE(fold(sum16(f, o, o + len, pseudo(src, dst, IP_TCP, len))), o + 16);
  return f;
}

/** Sequence arithmetic modulo 2^32. */
export const seqLt = (a: number, b: number) => ((a - b) | 0) < 0;
export const seqLe = (a: number, b: number) => ((a - b) | 0) <= 0;
export const seqAdd = (a: number, n: number) => (a + n) >>> 0;
export const seqDiff = (a: number, b: number) => (a - b) | 0;
