import { createSocket, type Socket as DgramSocket } from 'node:dgram';
import { createServer, type Server, type Socket } from 'node:net';
import type { PortForward } from '../../domain/vm.js';

/** Where a forward's traffic goes: the guest's network (GuestLan). */
export interface ForwardSink {
  /** A host connection to a TCP forward, for the guest's `guestPort`. */
  tcpIn(sock: Socket, guestPort: number): void;
  /** A host datagram to a UDP forward, for the guest's `guestPort`, sent from gateway port `gwPort`. */
  udpIn(gwPort: number, guestPort: number, msg: Buffer): void;
}

interface Forward {
  spec: PortForward;
  server: Server | DgramSocket;
}

/** A UDP forward's host client, known to the guest by the gateway port its datagrams came from. */
interface UdpClient {
  server: DgramSocket;
  address: string;
  port: number;
  idle: NodeJS.Timeout;
}

const FIRST_PORT = 40000;
const LAST_PORT = 64999;
/** A UDP forward's client that has sent nothing for this long loses its gateway port. */
const UDP_CLIENT_IDLE_MS = 60_000;

/**
 * One VM's host forwards: the loopback ports bound for it, and the gateway ports its forwarded
 * traffic comes from inside the guest (a TCP connection's for its life, a UDP client's while it
 * sends). The guest answers a UDP client to that gateway port; `answer` carries it back.
 */
export class HostForwards {
  private readonly forwards = new Map<string, Forward>();
  private readonly udpClients = new Map<number, UdpClient>();
  private readonly gwPorts = new Set<number>();
  private nextPort = FIRST_PORT;

  constructor(private readonly sink: ForwardSink) {}

  /** Opens host ports into the guest (host_port 0: one is picked). Resolves with the ports bound; binds none on a failure. */
  async add(specs: PortForward[]): Promise<PortForward[]> {
    const out: PortForward[] = [];
    try {
      for (const s of specs) out.push(await this.addOne(s));
    } catch (err) {
      for (const f of out) this.remove(f.host_port, f.proto);
      throw err;
    }
    return out;
  }

  remove(hostPort: number, proto: 'tcp' | 'udp'): boolean {
    const f = this.forwards.get(`${proto}:${hostPort}`);
    if (!f) return false;
    this.forwards.delete(`${proto}:${hostPort}`);
    f.server.close();
    return true;
  }

  list(): PortForward[] {
    return [...this.forwards.values()].map((f) => ({ ...f.spec }));
  }

  /** A gateway port of its own, for one forwarded connection or client. */
  allocPort(): number {
    for (let i = 0; i <= LAST_PORT - FIRST_PORT; i++) {
      const p = this.nextPort;
      this.nextPort = p >= LAST_PORT ? FIRST_PORT : p + 1;
      if (!this.gwPorts.has(p)) {
        this.gwPorts.add(p);
        return p;
      }
    }
    throw new Error('no gateway port free');
  }

  releasePort(p: number): void {
    this.gwPorts.delete(p);
  }

  /** The guest's datagram to gateway port `gwPort`: to the UDP client that port carries. False when it carries none. */
  answer(gwPort: number, payload: Buffer): boolean {
    const client = this.udpClients.get(gwPort);
    if (!client) return false;
    client.server.send(payload, client.port, client.address);
    return true;
  }

  /** Every host port closed: the VM is gone. */
  close(): void {
    for (const f of [...this.forwards.values()]) this.remove(f.spec.host_port, f.spec.proto);
    for (const c of this.udpClients.values()) clearTimeout(c.idle);
    this.udpClients.clear();
  }

  private async addOne(s: PortForward): Promise<PortForward> {
    const existing = this.forwards.get(`${s.proto}:${s.host_port}`);
    if (existing && s.host_port) {
      if (existing.spec.guest_port === s.guest_port) return existing.spec;
      throw Object.assign(new Error(`host port ${s.host_port}/${s.proto} is forwarded already`), {
        code: 'EADDRINUSE',
      });
    }
    if (s.proto === 'tcp') {
      const server = createServer({ allowHalfOpen: true, pauseOnConnect: true }, (sock) =>
        this.sink.tcpIn(sock, s.guest_port),
      );
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(s.host_port, '127.0.0.1', () => resolve());
      });
      server.on('error', () => undefined);
      const spec = { ...s, host_port: (server.address() as { port: number }).port };
      this.forwards.set(`tcp:${spec.host_port}`, { spec, server });
      return spec;
    }
    const server = createSocket('udp4');
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.bind(s.host_port, '127.0.0.1', () => resolve());
    });
    server.on('error', () => undefined);
    const spec = { ...s, host_port: server.address().port };
    server.on('message', (msg, rinfo) => this.udpInbound(server, spec, msg, rinfo.address, rinfo.port));
    this.forwards.set(`udp:${spec.host_port}`, { spec, server });
    return spec;
  }

  /** A datagram to a UDP forward's host port: to the guest, from the gateway port its client has (or is given). */
  private udpInbound(server: DgramSocket, spec: PortForward, msg: Buffer, address: string, port: number): void {
    let gwPort = [...this.udpClients.entries()].find(
      ([, c]) => c.server === server && c.address === address && c.port === port,
    )?.[0];
    if (gwPort === undefined) {
      gwPort = this.allocPort();
      this.udpClients.set(gwPort, { server, address, port, idle: setTimeout(() => undefined, 0) });
    }
    const gp = gwPort;
    const c = this.udpClients.get(gp)!;
    clearTimeout(c.idle);
    c.idle = setTimeout(() => {
      this.udpClients.delete(gp);
      this.releasePort(gp);
    }, UDP_CLIENT_IDLE_MS).unref();
    this.sink.udpIn(gp, spec.guest_port, msg);
  }
}
