import { createSocket, type Socket } from 'node:dgram';
import { createServer, type Server } from 'node:net';
import { readQuestion } from '../../src/adapters/netd/dns-message.js';

/**
 * A resolver for tests, on 127.0.0.1 (UDP and TCP on one port): names in `zone` answer their IPv4
 * addresses, others NXDOMAIN. Counts the queries it got, by name.
 */
export class TestDns {
  readonly asked = new Map<string, number>();
  port = 0;
  private udp: Socket | undefined;
  private tcp: Server | undefined;

  constructor(readonly zone: Record<string, string[]>) {}

  /**
   * UDP and TCP on one port: UDP takes a free one, and TCP may find that number taken by another
   * process (a CI run beside VMs met it): then both try again on another.
   */
  async start(): Promise<this> {
    for (let tries = 1; ; tries++) {
      try {
        return await this.listen();
      } catch (err) {
        this.udp?.close();
        this.tcp?.close();
        if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE' || tries >= 20) throw err;
      }
    }
  }

  private async listen(): Promise<this> {
    this.udp = createSocket('udp4');
    await new Promise<void>((r) => this.udp!.bind(0, '127.0.0.1', () => r()));
    this.port = this.udp.address().port;
    this.udp.on('message', (m, rinfo) => {
      const a = this.answer(m);
      if (a) this.udp!.send(a, rinfo.port, rinfo.address);
    });
    this.tcp = createServer((s) => {
      let buf = Buffer.alloc(0);
      s.on('data', (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
          const a = this.answer(buf.subarray(2, 2 + buf.readUInt16BE(0)));
          buf = buf.subarray(2 + buf.readUInt16BE(0));
          if (a) s.write(Buffer.concat([Buffer.from([a.length >> 8, a.length & 255]), a]));
        }
      });
      s.on('error', () => undefined);
    });
    await new Promise<void>((r, j) => this.tcp!.once('error', j).listen(this.port, '127.0.0.1', () => r()));
    return this;
  }

  private answer(m: Buffer): Buffer | undefined {
    let q;
    try {
      q = readQuestion(m);
    } catch {
      return undefined;
    }
    this.asked.set(q.name, (this.asked.get(q.name) ?? 0) + 1);
    const addrs = q.type === 1 ? (this.zone[q.name] ?? []) : [];
    const known = q.name in this.zone;
    const h = Buffer.alloc(12);
    h.writeUInt16BE(q.id, 0);
    h.writeUInt16BE(0x8180 | (known ? 0 : 3), 2);
    h.writeUInt16BE(1, 4);
    h.writeUInt16BE(addrs.length, 6);
    const rrs = addrs.map((a) => {
      const rr = Buffer.alloc(16);
      rr.writeUInt16BE(0xc00c, 0);
      rr.writeUInt16BE(1, 2);
      rr.writeUInt16BE(1, 4);
      rr.writeUInt32BE(30, 6);
      rr.writeUInt16BE(4, 10);
      a.split('.').forEach((o, i) => (rr[12 + i] = Number(o)));
      return rr;
    });
    return Buffer.concat([h, q.raw, ...rrs]);
  }

  stop(): void {
    this.udp?.close();
    this.tcp?.close();
  }
}

/** A DNS query for `name` (type A unless given), with an OPT record when `edns`. */
export function dnsQuery(name: string, id = 0x1234, type = 1, edns = false): Buffer {
  const h = Buffer.alloc(12);
  h.writeUInt16BE(id, 0);
  h.writeUInt16BE(0x0100, 2);
  h.writeUInt16BE(1, 4);
  h.writeUInt16BE(edns ? 1 : 0, 10);
  const labels = name.split('.').map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)]));
  const opt = edns ? Buffer.from([0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0]) : Buffer.alloc(0);
  return Buffer.concat([h, ...labels, Buffer.from([0, 0, type, 0, 1]), opt]);
}
