import { HOST_NAME } from '../../domain/egress.js';
import { dhcpReply, readDhcp } from './dhcp.js';
import type { EgressGuard } from './egress-guard.js';
import type { HostForwards } from './host-forwards.js';
import { BROADCAST, GW_MAC, inLan, LAN, MASK } from './lan-layout.js';
import { ipToString, readUdp, udpFrames, type Ipv4 } from './packets.js';
import { UdpFlows, type UdpFlow, type UdpHost } from './udp-flows.js';

/**
 * The UDP half of a guest's network (guest-lan.ts): DHCP and the resolver answered here, datagrams
 * to a forwarded host port's peer handed back, and the rest carried out through host sockets
 * (UdpFlows), each decided by the VM's egress policy and logged.
 */
export class LanUdp {
  private readonly flows: UdpFlows;

  constructor(
    private readonly lan: UdpHost & { readonly forwards: HostForwards },
    private readonly guard: EgressGuard,
    private readonly o: {
      /** Where a datagram to an address beyond the network really goes (guest-lan.ts `LanOptions.route`). */
      route?: (addr: string, port: number) => { host: string; port: number };
      /** Tells the guest a datagram was refused (an ICMP "administratively prohibited"). */
      refuse: (ip: Ipv4) => void;
    },
  ) {
    this.flows = new UdpFlows(lan, (f) => this.closed(f));
  }

  get count(): number {
    return this.flows.all().length;
  }

  /** A datagram from the guest (`srcMac`: the frame's sender, whom a DHCP reply goes to). */
  input(ip: Ipv4, srcMac: Buffer): void {
    const u = readUdp(ip.payload);
    const lan = this.lan;
    if (u.dstPort === 67 && (ip.dst === BROADCAST || ip.dst === LAN.gateway)) {
      const req = readDhcp(u.payload);
      const reply =
        req && dhcpReply(req, { client: lan.guestIp, gateway: LAN.gateway, dns: LAN.dns, mask: MASK, leaseSec: 86400 });
      if (reply) {
        for (const f of udpFrames({ dstMac: srcMac, srcMac: GW_MAC }, LAN.gateway, 67, BROADCAST, 68, reply, lan.mtu))
          lan.emit(f);
      }
      return;
    }
    if (ip.src === 0) return;
    if (ip.dst === LAN.dns && u.dstPort === 53) {
      const q = Buffer.from(u.payload);
      void this.guard.dns(q, false, LAN.gateway).then((a) => {
        if (a) for (const f of udpFrames(lan.link, LAN.dns, 53, lan.guestIp, u.srcPort, a, lan.mtu)) lan.emit(f);
      });
      return;
    }
    if (ip.dst === LAN.gateway) {
      if (lan.forwards.answer(u.dstPort, Buffer.from(u.payload))) return;
      const d = this.guard.hostPort(u.dstPort);
      if (!d.allow) return this.refused(ip, 'host', u.dstPort, d.rule, HOST_NAME);
      this.flows.send(
        u.srcPort,
        ip.dst,
        u.dstPort,
        { address: '127.0.0.1', port: u.dstPort },
        Buffer.from(u.payload),
        { rule: d.rule, names: [HOST_NAME] },
        (f) => this.opened(f, 'host'),
      );
      return;
    }
    if (inLan(ip.dst) || ip.dst === BROADCAST) return;
    const d = this.guard.connect(ip.dst, u.dstPort, 'udp');
    const addr = ipToString(ip.dst);
    if (!d.allow) return this.refused(ip, addr, u.dstPort, d.rule, d.names[0]);
    const to = this.o.route?.(addr, u.dstPort) ?? { host: addr, port: u.dstPort };
    this.flows.send(
      u.srcPort,
      ip.dst,
      u.dstPort,
      { address: to.host, port: to.port },
      Buffer.from(u.payload),
      { rule: d.rule, names: d.names },
      (f) => this.opened(f, addr),
    );
  }

  /** Closes the flows the guard's policy (just changed) forbids now. */
  recheck(): void {
    for (const f of this.flows.all()) {
      const d =
        f.remoteIp === LAN.gateway
          ? this.guard.hostPort(f.remotePort)
          : this.guard.connect(f.remoteIp, f.remotePort, 'udp');
      if (!d.allow) {
        f.meta.rule = `ended:${d.rule}`;
        this.flows.close(f);
      }
    }
  }

  closeAll(): void {
    this.flows.closeAll();
  }

  private refused(ip: Ipv4, addr: string, port: number, rule: string, name?: string): void {
    this.guard.fold({ event: 'deny', proto: 'udp', addr, port, name, decision: 'deny', rule });
    this.o.refuse(ip);
  }

  private opened(f: UdpFlow, addr: string): void {
    this.guard.fold({
      event: 'open',
      proto: 'udp',
      addr,
      port: f.remotePort,
      name: f.meta.names[0],
      decision: 'allow',
      rule: f.meta.rule,
    });
  }

  private closed(f: UdpFlow): void {
    const ended = f.meta.rule.startsWith('ended:') ? f.meta.rule.slice(6) : undefined;
    this.guard.fold({
      event: 'close',
      proto: 'udp',
      addr: f.remoteIp === LAN.gateway ? 'host' : ipToString(f.remoteIp),
      port: f.remotePort,
      name: f.meta.names[0],
      decision: ended ? 'deny' : 'allow',
      rule: ended ?? f.meta.rule,
      bytes_out: f.bytesOut,
      bytes_in: f.bytesIn,
      duration_ms: Date.now() - f.openedAt,
    });
  }
}
