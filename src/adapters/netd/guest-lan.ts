import { connect, type Socket } from 'node:net';
import { HOST_NAME, type EgressDecision, type EgressPolicy, type EgressProxy } from '../../domain/egress.js';
import { DnsOverTcp } from './dns-tcp.js';
import type { DnsUpstream, HostAddresses } from './dns-upstream.js';
import { EgressGuard, type EgressEntry } from './egress-guard.js';
import { HostForwards } from './host-forwards.js';
import {
  arpFrame,
  ETH_ARP,
  ETH_IPV4,
  icmpFrame,
  IP_ICMP,
  IP_TCP,
  IP_UDP,
  ipFrom,
  ipToString,
  prohibited,
  readArp,
  readEth,
  readIcmp,
  readIpv4,
  readTcp,
  TCP_ACK,
  TCP_RST,
  TCP_SYN,
  udpFrames,
  type Ipv4,
  type Link,
  type Tcp,
} from './packets.js';
import type { EgressSecrets } from './secret-proxy.js';
import { checkShown, type Conn } from './lan-conn.js';
import { ProxyDialer } from './socks-dial.js';
import { flowKey, resetFor, TcpFlow, type FlowHost } from './tcp-flow.js';
import type { UdpHost } from './udp-flows.js';
import { LanUdp } from './lan-udp.js';
import { BROADCAST, DNS_MAC, GUEST_MAC, GW_MAC, inLan, LAN } from './lan-layout.js';

/** A frame larger than this from QEMU means the stream is out of step. */
const MAX_FRAME = 70_000;
/** Frames queued to QEMU past which flows stop sending until it drains. */
const CONGESTED = 4 << 20;
const CONNECT_TIMEOUT_MS = 30_000;

export interface LanOptions {
  vm: string;
  policy: EgressPolicy;
  upstream: DnsUpstream;
  hostAddresses: HostAddresses;
  /** Every egress decision. */
  audit: (e: EgressEntry) => void;
  /** Where a connection to an address beyond the network really goes (tests send public addresses to local servers). */
  route?: (addr: string, port: number) => { host: string; port: number };
  /** Reads a host secret (a SOCKS proxy's password); none: a proxy with a password is not dialed. */
  secretValue?: (name: string) => Promise<Buffer | undefined>;
}

/**
 * One VM's network, in place of QEMU's user-mode network: QEMU hands the guest's Ethernet frames
 * over a stream socket (`-netdev stream`), and this answers them. It is the gateway (10.0.2.2),
 * resolver (10.0.2.3) and DHCP server of a /24 the guest has to itself, forwards host ports in
 * (HostForwards), and carries the guest's TCP (TcpFlow) and UDP (lan-udp.ts) out through host
 * sockets, each decided by the VM's egress policy (EgressGuard). The host's loopback is never a
 * destination, but for the ports a `host:PORT` rule names, reached at the gateway's address
 * (`host.svc.internal`). Its addresses are lan-layout.ts's.
 */
export class GuestLan implements FlowHost, UdpHost {
  readonly guestIp = LAN.guest;
  readonly mtu = 1500;
  link: Link = { dstMac: GUEST_MAC, srcMac: GW_MAC };
  socketPath: string | undefined;

  private qemu: Socket | undefined;
  private pending: Buffer | undefined;
  private corked = false;
  private readonly conns = new Map<string, Conn>();
  private readonly dirty = new Set<TcpFlow>();
  private readonly udp: LanUdp;
  private readonly guard: EgressGuard;
  /** The host ports forwarded into the guest. */
  readonly forwards = new HostForwards({
    tcpIn: (sock, guestPort) => this.inbound(sock, guestPort),
    udpIn: (gwPort, guestPort, msg) => {
      for (const f of udpFrames(this.link, LAN.gateway, gwPort, this.guestIp, guestPort, msg, this.mtu)) this.emit(f);
    },
  });
  /** Frames from the guest this network could not read (a count, for `list`). */
  badFrames = 0;
  /** The VM's egress secrets (docs/egress-secrets.md): connections to their hosts get them put in. */
  secrets: EgressSecrets | undefined;

  constructor(private readonly o: LanOptions) {
    this.guard = new EgressGuard(o.policy, o.upstream, o.hostAddresses, (e) => o.audit(e));
    this.udp = new LanUdp(this, this.guard, {
      route: o.route,
      refuse: (ip) => this.emit(prohibited(this.link, LAN.gateway, ip)),
    });
  }

  /** Logs an egress entry of this network's (repeats within a second counted into one line). */
  audit(e: EgressEntry): void {
    this.guard.fold(e);
  }

  get policy(): EgressPolicy {
    return this.guard.policy;
  }

  get connected(): boolean {
    return !!this.qemu && !this.qemu.destroyed;
  }

  /** Connects to QEMU's end of the link (`-netdev stream,server=on`), trying until `timeoutMs` while QEMU starts. */
  async connect(path: string, timeoutMs = 10_000): Promise<void> {
    if (this.connected && this.socketPath === path) return;
    this.disconnect();
    this.socketPath = path;
    const until = Date.now() + timeoutMs;
    for (;;) {
      try {
        const sock = await new Promise<Socket>((resolve, reject) => {
          const s = connect(path);
          s.once('connect', () => resolve(s));
          s.once('error', reject);
        });
        if (this.socketPath !== path) {
          sock.destroy();
          return;
        }
        this.qemu = sock;
        sock.on('data', (d: Buffer) => this.fromQemu(d));
        sock.on('drain', () => this.pumpAll());
        sock.on('error', () => undefined);
        sock.on('close', () => {
          if (this.qemu === sock) this.qemu = undefined;
        });
        return;
      } catch (err) {
        if (Date.now() > until || this.socketPath !== path)
          throw new Error(`cannot reach the vm's network socket ${path}: ${(err as Error).message}`);
        await new Promise((r) => setTimeout(r, 25));
      }
    }
  }

  /** Lets go of QEMU's socket (the VM stopped); flows to and from the guest end. */
  disconnect(): void {
    this.socketPath = undefined;
    this.qemu?.destroy();
    this.qemu = undefined;
    this.pending = undefined;
    for (const c of [...this.conns.values()]) c.flow.abort();
    this.udp.closeAll();
  }

  setPolicy(policy: EgressPolicy): void {
    this.guard.setPolicy(policy);
    // Connections the new policy forbids are closed now.
    for (const c of [...this.conns.values()]) {
      if (c.kind === 'in' || c.kind === 'local') continue;
      let d = c.kind === 'host' ? this.guard.hostPort(c.port) : this.guard.connect(ipFrom(c.addr), c.port, 'tcp');
      if (d.allow && c.shown) d = this.guard.shown(c.shown, c.port, d);
      if (!d.allow) {
        c.endedBy = d.rule;
        c.flow.abort();
      } else {
        c.decision = d;
      }
    }
    this.udp.recheck();
  }

  /** Everything closed: the VM is gone. */
  close(): void {
    this.disconnect();
    this.forwards.close();
    this.guard.close();
  }

  stats(): { tcp: number; udp: number; bad_frames: number; connected: boolean } {
    return { tcp: this.conns.size, udp: this.udp.count, bad_frames: this.badFrames, connected: this.connected };
  }

  // ---- the link to QEMU ----

  emit(frame: Buffer): void {
    const q = this.qemu;
    if (!q || q.destroyed) return;
    if (!this.corked) {
      this.corked = true;
      q.cork();
      process.nextTick(() => {
        this.corked = false;
        q.uncork();
      });
    }
    const len = Buffer.allocUnsafe(4);
    len.writeUInt32BE(frame.length);
    q.write(len);
    q.write(frame);
  }

  congested(): boolean {
    return (this.qemu?.writableLength ?? 0) > CONGESTED;
  }

  private pumpAll(): void {
    for (const c of this.conns.values()) c.flow.pump();
  }

  private fromQemu(d: Buffer): void {
    const buf = this.pending ? Buffer.concat([this.pending, d]) : d;
    let off = 0;
    while (buf.length - off >= 4) {
      const len = buf.readUInt32BE(off);
      if (len > MAX_FRAME) {
        this.qemu?.destroy();
        return;
      }
      if (buf.length - off - 4 < len) break;
      const frame = buf.subarray(off + 4, off + 4 + len);
      off += 4 + len;
      try {
        this.frame(frame);
      } catch {
        this.badFrames++;
      }
    }
    this.pending = off < buf.length ? Buffer.from(buf.subarray(off)) : undefined;
    for (const f of this.dirty) f.flushAck();
    this.dirty.clear();
  }

  private frame(f: Buffer): void {
    const eth = readEth(f);
    const toUs = eth.dst.equals(GW_MAC) || eth.dst.equals(DNS_MAC) || eth.dst.every((b) => b === 0xff);
    if (!toUs) return;
    if (eth.type === ETH_ARP) return this.arp(eth.payload, eth.src);
    if (eth.type !== ETH_IPV4) return; // IPv6 and the rest: the guest's network is IPv4 only
    const ip = readIpv4(eth.payload);
    if (ip.src !== this.guestIp && ip.src !== 0) return;
    if (ip.src === this.guestIp && !eth.src.equals(this.link.dstMac))
      this.link = { dstMac: Buffer.from(eth.src), srcMac: GW_MAC };
    if (ip.fragment) return; // not reassembled: guests send TCP unfragmented, and UDP this large rarely
    if (ip.proto === IP_TCP) return this.tcp(ip, readTcp(ip.payload));
    if (ip.proto === IP_UDP) return this.udp.input(ip, Buffer.from(eth.src));
    if (ip.proto === IP_ICMP) return this.icmp(ip);
  }

  private arp(payload: Buffer, src: Buffer): void {
    const a = readArp(payload);
    if (a.senderIp === this.guestIp) this.link = { dstMac: Buffer.from(a.senderMac), srcMac: GW_MAC };
    if (a.op !== 1) return;
    const mac = a.targetIp === LAN.gateway ? GW_MAC : a.targetIp === LAN.dns ? DNS_MAC : undefined;
    if (mac) this.emit(arpFrame(2, mac, a.targetIp, src, a.senderIp));
  }

  private icmp(ip: Ipv4): void {
    const m = readIcmp(ip.payload);
    if (m.type !== 8) return;
    if (ip.dst === LAN.gateway || ip.dst === LAN.dns) {
      this.emit(icmpFrame(this.link, ip.dst, ip.src, 0, 0, ip.payload.subarray(4)));
      return;
    }
    // Pings do not leave the network (no echo tunnel); the guest hears why at once.
    this.guard.fold({ event: 'deny', proto: 'icmp', addr: ipToString(ip.dst), decision: 'deny', rule: 'icmp' });
    this.emit(prohibited(this.link, LAN.gateway, ip));
  }

  // ---- TCP ----

  private tcp(ip: Ipv4, t: Tcp): void {
    const c = this.conns.get(flowKey(ip.dst, t.dstPort, t.srcPort));
    if (c) {
      c.flow.input(t);
      if (c.flow.open) this.dirty.add(c.flow);
      return;
    }
    if (!(t.flags & TCP_SYN) || t.flags & TCP_ACK) {
      if (!(t.flags & TCP_RST)) this.emit(resetFor(this, ip.dst, t));
      return;
    }
    const ends = { remoteIp: ip.dst, remotePort: t.dstPort, guestPort: t.srcPort };
    if (ip.dst === LAN.dns && t.dstPort === 53) {
      const flow = TcpFlow.fromGuest(this, ends, t);
      this.conns.set(flow.key, {
        flow,
        kind: 'local',
        addr: ipToString(ip.dst),
        port: 53,
        decision: { allow: true, rule: 'resolver' },
        names: [],
      });
      flow.connected(new DnsOverTcp((m) => this.guard.dns(m, true, LAN.gateway)));
      return;
    }
    if (ip.dst === LAN.gateway) {
      return this.open(ends, t, { ...this.guard.hostPort(t.dstPort), names: [HOST_NAME] }, 'host', '127.0.0.1');
    }
    if (inLan(ip.dst) || ip.dst === BROADCAST || ip.dst >>> 28 === 0xe) {
      this.emit(resetFor(this, ip.dst, t));
      return;
    }
    this.open(ends, t, this.guard.connect(ip.dst, t.dstPort, 'tcp'), 'out', ipToString(ip.dst));
  }

  private open(
    ends: { remoteIp: number; remotePort: number; guestPort: number },
    syn: Tcp,
    d: EgressDecision & { names: string[] },
    kind: 'out' | 'host',
    target: string,
  ): void {
    const addr = kind === 'host' ? 'host' : target;
    const name = d.names[0];
    if (!d.allow) {
      this.guard.fold({
        event: 'deny',
        proto: 'tcp',
        addr,
        port: ends.remotePort,
        name,
        decision: 'deny',
        rule: d.rule,
      });
      this.emit(resetFor(this, ends.remoteIp, syn));
      return;
    }
    const flow = TcpFlow.fromGuest(this, ends, syn);
    const c: Conn = { flow, kind, addr, port: ends.remotePort, decision: d, names: d.names };
    this.conns.set(flow.key, c);
    this.guard.fold({
      event: 'open',
      proto: 'tcp',
      addr,
      port: ends.remotePort,
      name,
      decision: 'allow',
      rule: d.rule,
    });
    // What the connection shows (SNI, Host) is checked when a name let it through or a deny rule
    // names one, and read when the VM has egress secrets (they are put in for the hosts they are for).
    if ((kind === 'out' && (d.byName || this.guard.policy.deny.length)) || this.secrets?.bindings.length) {
      flow.hold();
      flow.onHeld = () => checkShown(c, this.guard, this.secrets);
    }
    const proxy = kind === 'out' ? this.guard.policy.proxy : undefined;
    if (proxy) return this.viaProxy(c, proxy, d.byName && name ? name : target);
    const to =
      kind === 'out'
        ? (this.o.route?.(target, ends.remotePort) ?? { host: target, port: ends.remotePort })
        : { host: target, port: ends.remotePort };
    const sock = connect({ host: to.host, port: to.port, allowHalfOpen: true });
    c.sock = sock;
    c.to = to;
    sock.setTimeout(CONNECT_TIMEOUT_MS, () => sock.destroy(new Error('connect timed out')));
    sock.once('connect', () => {
      sock.setTimeout(0);
      flow.connected(sock);
    });
    sock.once('error', (err: NodeJS.ErrnoException) => {
      if (flow.state !== 'connecting') return;
      c.error = err.code ?? err.message;
      flow.abort();
    });
  }

  /**
   * An allowed outbound connection tunneled through the policy's SOCKS5 proxy: by the name that let
   * it out (the proxy resolves it) or by its address. Fails closed: a proxy that cannot be reached
   * or refuses resets the guest's connection, which is never dialed directly instead.
   */
  private viaProxy(c: Conn, proxy: EgressProxy, host: string): void {
    c.to = { host, port: c.port };
    const dialer = new ProxyDialer(proxy, c.to, this.o.secretValue, CONNECT_TIMEOUT_MS);
    c.reopen = () => dialer.reopen();
    dialer
      .dial((s) => (c.dialing = s))
      .then(
        (sock) => {
          c.dialing = undefined;
          if (c.flow.state !== 'connecting') return void sock.destroy();
          c.sock = sock;
          c.flow.connected(sock);
        },
        (err: Error) => {
          c.dialing = undefined;
          if (c.flow.state !== 'connecting') return;
          c.error = err.message;
          c.flow.abort();
        },
      );
  }

  private inbound(sock: Socket, guestPort: number): void {
    if (!this.connected) {
      sock.destroy();
      return;
    }
    const gwPort = this.forwards.allocPort();
    const flow = TcpFlow.toGuest(this, { remoteIp: LAN.gateway, remotePort: gwPort, guestPort }, sock);
    this.conns.set(flow.key, {
      flow,
      kind: 'in',
      addr: 'guest',
      port: guestPort,
      decision: { allow: true, rule: 'forward' },
      names: [],
    });
  }

  closed(flow: TcpFlow): void {
    const c = this.conns.get(flow.key);
    if (!c || c.flow !== flow) return;
    this.conns.delete(flow.key);
    this.dirty.delete(flow);
    c.dialing?.destroy();
    if (c.kind === 'in') {
      this.forwards.releasePort(flow.ends.remotePort);
      return;
    }
    if (c.kind === 'local') return;
    this.guard.fold({
      event: 'close',
      proto: 'tcp',
      addr: c.addr,
      port: c.port,
      name: c.shown ?? c.names[0],
      decision: c.endedBy ? 'deny' : 'allow',
      rule: c.endedBy ?? c.decision.rule,
      bytes_out: flow.bytesOut,
      bytes_in: flow.bytesIn,
      duration_ms: Date.now() - flow.openedAt,
      ...(c.error ? { error: c.error } : {}),
    });
  }
}
