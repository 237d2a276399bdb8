import { createServer, type Server, type Socket } from 'node:net';
import {
  arpFrame,
  ETH_ARP,
  ETH_IPV4,
  IP_TCP,
  IP_UDP,
  ipFrom,
  macFrom,
  readArp,
  readEth,
  readIcmp,
  readIpv4,
  readTcp,
  readUdp,
  sum16,
  fold,
  tcpFrame,
  TCP_ACK,
  TCP_SYN,
  type Tcp,
} from '../../src/adapters/netd/packets.js';

export const GUEST_IP = ipFrom('10.0.2.15');
export const GW_IP = ipFrom('10.0.2.2');
export const DNS_IP = ipFrom('10.0.2.3');
export const GUEST_MAC = macFrom('52:54:00:12:34:56');
export const GW_MAC = macFrom('52:55:0a:00:02:02');

/** A frame the network sent, read as far as it goes. */
export interface Seen {
  raw: Buffer;
  type: number;
  arp?: ReturnType<typeof readArp>;
  ip?: ReturnType<typeof readIpv4>;
  tcp?: Tcp;
  udp?: ReturnType<typeof readUdp>;
  icmp?: ReturnType<typeof readIcmp>;
}

/**
 * QEMU's side of a `-netdev stream` link with a scripted guest behind it, for tests of the
 * network process without a VM: it listens on a Unix socket (as QEMU does), sends the frames a
 * test writes and collects the ones it gets, read and checked (every IPv4 header checksum must
 * be right).
 */
export class FrameGuest {
  readonly frames: Seen[] = [];
  private server: Server | undefined;
  private sock: Socket | undefined;
  private buf = Buffer.alloc(0);
  private waiters: (() => void)[] = [];

  constructor(readonly path: string) {}

  listen(): Promise<void> {
    return new Promise((resolve) => {
      this.server = createServer((s) => {
        this.sock = s;
        s.on('data', (d: Buffer) => this.data(d));
        s.on('error', () => undefined);
      });
      this.server.listen(this.path, () => resolve());
    });
  }

  private data(d: Buffer): void {
    this.buf = Buffer.concat([this.buf, d]);
    while (this.buf.length >= 4 && this.buf.length >= 4 + this.buf.readUInt32BE(0)) {
      const f = this.buf.subarray(4, 4 + this.buf.readUInt32BE(0));
      this.buf = this.buf.subarray(4 + f.length);
      this.frames.push(read(Buffer.from(f)));
    }
    for (const w of this.waiters.splice(0)) w();
  }

  send(frame: Buffer): void {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(frame.length);
    this.sock!.write(Buffer.concat([len, frame]));
  }

  /** Waits for a frame `match` accepts (among those not taken yet), and takes it. */
  async next(match: (f: Seen) => boolean, ms = 3000): Promise<Seen> {
    const until = Date.now() + ms;
    for (;;) {
      const i = this.frames.findIndex(match);
      if (i >= 0) return this.frames.splice(i, 1)[0];
      const left = until - Date.now();
      if (left <= 0) throw new Error(`no such frame within ${ms} ms; have ${this.frames.length}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }

  /** Sends a TCP segment from the guest. */
  tcp(dst: number, t: Omit<Parameters<typeof tcpFrame>[3], 'window'> & { window?: number }, payload?: Buffer): void {
    this.send(tcpFrame({ dstMac: GW_MAC, srcMac: GUEST_MAC }, GUEST_IP, dst, { window: 65535, ...t }, payload));
  }

  /** Opens a connection from the guest: SYN, then the SYN-ACK (or reset) it gets. */
  async connect(dst: number, port: number, srcPort: number): Promise<Seen> {
    this.tcp(dst, { srcPort, dstPort: port, seq: 1000, ack: 0, flags: TCP_SYN, mss: 1460, wscale: 7 });
    return this.next((f) => !!f.tcp && f.tcp.dstPort === srcPort && f.tcp.srcPort === port);
  }

  /** Acknowledges a SYN-ACK and sends `data` on a connection `connect` opened. */
  established(dst: number, port: number, srcPort: number, synAck: Tcp, data?: Buffer): void {
    this.tcp(dst, { srcPort, dstPort: port, seq: 1001, ack: (synAck.seq + 1) >>> 0, flags: TCP_ACK }, data);
  }

  arpRequest(target: number): void {
    this.send(arpFrame(1, GUEST_MAC, GUEST_IP, Buffer.alloc(6), target));
  }

  close(): Promise<void> {
    this.sock?.destroy();
    return new Promise((r) => (this.server ? this.server.close(() => r()) : r()));
  }
}

function read(raw: Buffer): Seen {
  const eth = readEth(raw);
  const s: Seen = { raw, type: eth.type };
  if (eth.type === ETH_ARP) s.arp = readArp(eth.payload);
  if (eth.type === ETH_IPV4) {
    s.ip = readIpv4(eth.payload);
    if (fold(sum16(s.ip.header)) !== 0) throw new Error('bad ipv4 header checksum');
    if (s.ip.fragment) return s;
    if (s.ip.proto === IP_TCP) s.tcp = readTcp(s.ip.payload);
    else if (s.ip.proto === IP_UDP) s.udp = readUdp(s.ip.payload);
    else s.icmp = readIcmp(s.ip.payload);
  }
  return s;
}
