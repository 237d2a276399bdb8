import { createSocket, type Socket as DgramSocket } from 'node:dgram';
import { udpFrames, type Link } from './packets.js';

/** A flow that carries nothing this long is closed. */
const IDLE_MS = 60_000;
/** Flows per VM; past this the oldest goes. */
const MAX_FLOWS = 512;

export interface UdpHost {
  readonly link: Link;
  readonly guestIp: number;
  readonly mtu: number;
  emit(frame: Buffer): void;
}

/** One guest port talking to one far address, through a host socket of its own. */
export interface UdpFlow {
  key: string;
  guestPort: number;
  /** The far end as the guest addresses it. */
  remoteIp: number;
  remotePort: number;
  bytesOut: number;
  bytesIn: number;
  openedAt: number;
  /** What the egress check knew of it (for a re-check when the policy changes, and the log). */
  meta: { rule: string; names: string[] };
  sock: DgramSocket;
  idle: NodeJS.Timeout;
}

/**
 * The guest's UDP beyond its network: each (guest port, far address) pair gets a host socket, and
 * only answers from that far address come back (no other host may send the guest anything).
 */
export class UdpFlows {
  private readonly flows = new Map<string, UdpFlow>();

  constructor(
    private readonly host: UdpHost,
    private readonly onClose: (f: UdpFlow) => void,
  ) {}

  /** Sends `payload` from the guest's `guestPort` to `target` (what the guest called `remoteIp:remotePort`). */
  send(
    guestPort: number,
    remoteIp: number,
    remotePort: number,
    target: { address: string; port: number },
    payload: Buffer,
    meta: UdpFlow['meta'],
    opened: (f: UdpFlow) => void,
  ): void {
    const key = `${guestPort}>${remoteIp}:${remotePort}`;
    let f = this.flows.get(key);
    if (!f) {
      if (this.flows.size >= MAX_FLOWS) this.close(this.flows.values().next().value!);
      const sock = createSocket(target.address.includes(':') ? 'udp6' : 'udp4');
      f = {
        key,
        guestPort,
        remoteIp,
        remotePort,
        bytesOut: 0,
        bytesIn: 0,
        openedAt: Date.now(),
        meta,
        sock,
        idle: setTimeout(() => undefined, 0),
      };
      const flow = f;
      sock.on('error', () => this.close(flow));
      sock.on('message', (msg, rinfo) => {
        if (rinfo.address !== target.address || rinfo.port !== target.port) return;
        flow.bytesIn += msg.length;
        this.touch(flow);
        for (const frame of udpFrames(
          this.host.link,
          remoteIp,
          remotePort,
          this.host.guestIp,
          guestPort,
          msg,
          this.host.mtu,
        ))
          this.host.emit(frame);
      });
      this.flows.set(key, f);
      opened(f);
    }
    f.bytesOut += payload.length;
    this.touch(f);
    f.sock.send(payload, target.port, target.address);
  }

  private touch(f: UdpFlow): void {
    clearTimeout(f.idle);
    f.idle = setTimeout(() => this.close(f), IDLE_MS).unref();
  }

  close(f: UdpFlow): void {
    if (this.flows.get(f.key) !== f) return;
    this.flows.delete(f.key);
    clearTimeout(f.idle);
    try {
      f.sock.close();
    } catch {
      // closed already
    }
    this.onClose(f);
  }

  all(): UdpFlow[] {
    return [...this.flows.values()];
  }

  closeAll(): void {
    for (const f of this.all()) this.close(f);
  }
}
