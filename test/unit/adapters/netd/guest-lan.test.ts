import { expect } from 'chai';
import { createSocket } from 'node:dgram';
import { connect as tcpConnect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import type { EgressPolicy } from '../../../../src/domain/egress.js';
import { DnsUpstream, HostAddresses } from '../../../../src/adapters/netd/dns-upstream.js';
import type { EgressEntry } from '../../../../src/adapters/netd/egress-guard.js';
import { GuestLan } from '../../../../src/adapters/netd/guest-lan.js';
import { readAnswers, rcodeOf } from '../../../../src/adapters/netd/dns-message.js';
import {
  ETH_ARP,
  icmpFrame,
  ipFrom,
  ipToString,
  TCP_ACK,
  TCP_FIN,
  TCP_PSH,
  TCP_RST,
  TCP_SYN,
  udpFrames,
} from '../../../../src/adapters/netd/packets.js';
import { readDhcp } from '../../../../src/adapters/netd/dhcp.js';
import { dnsQuery, TestDns } from '../../../helpers/dns-server.js';
import { DNS_IP, FrameGuest, GUEST_IP, GUEST_MAC, GW_IP, GW_MAC, type Seen } from '../../../helpers/frame-guest.js';
import { tempDir } from '../../../helpers/daemon.js';
import { TestSocks } from '../../../helpers/socks-server.js';
import { poll } from '../../../helpers/wait.js';

const link = { dstMac: GW_MAC, srcMac: GUEST_MAC };
/** Public-looking addresses the tests' route sends to local servers. */
const PUBLIC = '93.184.216.34';
const OTHER = '93.184.216.35';

function dhcpDiscover(): Buffer {
  const b = Buffer.alloc(244);
  b[0] = 1;
  b[1] = 1;
  b[2] = 6;
  b.writeUInt32BE(0xabcdef01, 4);
  GUEST_MAC.copy(b, 28);
  b.writeUInt32BE(0x63825363, 236);
  b.set([53, 1, 1, 255], 240);
  return b;
}

/** The first bytes a TLS client sends (its ClientHello) for `servername`. */
async function clientHello(servername: string): Promise<Buffer> {
  let first!: (b: Buffer) => void;
  const got = new Promise<Buffer>((r) => (first = r));
  const srv = createServer((s) =>
    s.once('data', (d: Buffer) => {
      first(d);
      s.destroy();
    }),
  );
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const c = tlsConnect({
    host: '127.0.0.1',
    port: (srv.address() as AddressInfo).port,
    servername,
    rejectUnauthorized: false,
  });
  c.on('error', () => undefined);
  const hello = await got;
  srv.close();
  return hello;
}

/** A TCP server that keeps what it gets and echoes it. */
async function echoServer(): Promise<{ server: Server; port: number; got: Buffer[]; sockets: Socket[] }> {
  const got: Buffer[] = [];
  const sockets: Socket[] = [];
  const server = createServer({ allowHalfOpen: true }, (s) => {
    sockets.push(s);
    s.on('data', (d: Buffer) => {
      got.push(d);
      s.write(d);
    });
    s.on('end', () => s.end());
    s.on('error', () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { server, port: (server.address() as AddressInfo).port, got, sockets };
}

describe('adapters/netd/guest-lan: a guest network against a scripted guest', function () {
  this.timeout(20_000);
  let guest: FrameGuest;
  let lan: GuestLan;
  let dns: TestDns;
  let audit: EgressEntry[];
  let echo: Awaited<ReturnType<typeof echoServer>>;

  async function start(
    policy: Partial<EgressPolicy>,
    secretValue?: (name: string) => Promise<Buffer | undefined>,
  ): Promise<void> {
    lan = new GuestLan({
      secretValue,
      vm: 'v',
      policy: { default: 'allow', allow: [], deny: [], ...policy },
      upstream: new DnsUpstream([`127.0.0.1:${dns.port}`]),
      hostAddresses: new HostAddresses(),
      audit: (e) => audit.push(e),
      route: (addr, port) =>
        addr === PUBLIC || addr === OTHER
          ? { host: '127.0.0.1', port: port === 7 ? udpEchoPort : echo.port }
          : { host: addr, port },
    });
    await lan.connect(guest.path);
  }
  let udpEchoPort = 0;
  const udpEcho = createSocket('udp4');

  before(async () => {
    await new Promise<void>((r) => udpEcho.bind(0, '127.0.0.1', () => r()));
    udpEchoPort = udpEcho.address().port;
    udpEcho.on('message', (m, rinfo) => udpEcho.send(m, rinfo.port, rinfo.address));
  });
  after(() => udpEcho.close());

  beforeEach(async () => {
    guest = new FrameGuest(join(tempDir(), 'net.sock'));
    await guest.listen();
    dns = await new TestDns({ 'allowed.test': [PUBLIC], 'denied.test': [OTHER], 'loop.test': ['127.0.0.1'] }).start();
    echo = await echoServer();
    audit = [];
  });
  afterEach(async () => {
    lan?.close();
    await guest.close();
    dns.stop();
    echo.server.close();
    for (const s of echo.sockets) s.destroy();
  });

  const tcpFrom = (port: number, flags: number) => (f: Seen) =>
    !!f.tcp && f.tcp.srcPort === port && (f.tcp.flags & flags) === flags;

  it("answers ARP for the gateway and the resolver, and DHCP with the layout of QEMU's user network", async () => {
    await start({});
    guest.arpRequest(GW_IP);
    const arp = await guest.next((f) => f.type === ETH_ARP);
    expect(arp.arp!.op).to.equal(2);
    expect(arp.arp!.senderMac.toString('hex')).to.equal(GW_MAC.toString('hex'));
    guest.arpRequest(DNS_IP);
    expect((await guest.next((f) => f.type === ETH_ARP)).arp!.senderIp).to.equal(DNS_IP);
    guest.arpRequest(ipFrom('10.0.2.77'));
    await new Promise((r) => setTimeout(r, 100));
    expect(
      guest.frames.filter((f) => f.type === ETH_ARP),
      'no answer for an address nobody has',
    ).to.deep.equal([]);
    const discover = udpFrames(
      { dstMac: Buffer.alloc(6, 0xff), srcMac: GUEST_MAC },
      0,
      68,
      0xffffffff,
      67,
      dhcpDiscover(),
      1500,
    );
    guest.send(discover[0]);
    const offer = await guest.next((f) => f.udp?.dstPort === 68);
    const body = offer.udp!.payload;
    expect(ipToString(body.readUInt32BE(16)), 'yiaddr').to.equal('10.0.2.15');
    expect(readDhcp(Buffer.concat([Buffer.from([1]), body.subarray(1)]))!.type, 'an offer').to.equal(2);
  });

  it('answers pings to the gateway; a ping out is refused at once and logged', async () => {
    await start({});
    const rest = Buffer.from('0001000168656c6c6f', 'hex');
    guest.send(icmpFrame(link, GUEST_IP, GW_IP, 8, 0, rest));
    const reply = await guest.next((f) => !!f.icmp);
    expect(reply.icmp!.type).to.equal(0);
    expect(reply.icmp!.rest.toString('hex')).to.equal(rest.toString('hex'));
    guest.send(icmpFrame(link, GUEST_IP, ipFrom('8.8.8.8'), 8, 0, rest));
    const refused = await guest.next((f) => !!f.icmp);
    expect([refused.icmp!.type, refused.icmp!.code]).to.deep.equal([3, 13]);
    expect(audit).to.deep.include({ event: 'deny', proto: 'icmp', addr: '8.8.8.8', decision: 'deny', rule: 'icmp' });
  });

  it('resolves allowed names upstream, refuses the rest with NXDOMAIN (an extended error over EDNS), and names the host', async () => {
    await start({ deny: ['denied.test'] });
    const ask = async (name: string, edns = false) => {
      guest.send(udpFrames(link, GUEST_IP, 5353, DNS_IP, 53, dnsQuery(name, 7, 1, edns), 1500)[0]);
      return (await guest.next((f) => f.udp?.dstPort === 5353)).udp!.payload;
    };
    expect(readAnswers(await ask('allowed.test')).a).to.deep.equal([PUBLIC]);
    const refused = await ask('denied.test', true);
    expect(rcodeOf(refused)).to.equal(3);
    expect(refused.toString('latin1')).to.include('egress policy');
    expect(
      dns.asked.has('denied.test') ? dns.asked.get('denied.test') : 0,
      "the guest's query never left",
    ).to.be.at.most(1);
    expect(readAnswers(await ask('host.svc.internal')).a).to.deep.equal(['10.0.2.2']);
    expect(rcodeOf(await ask('other.svc.internal'))).to.equal(3);
    expect(audit.find((e) => e.name === 'denied.test' && e.event === 'dns')).to.include({
      decision: 'deny',
      rule: 'denied.test',
    });
    expect(audit.find((e) => e.name === 'allowed.test')).to.deep.include({ decision: 'allow', answers: [PUBLIC] });
  });

  it('opens a host loopback port only when a rule names it; data both ways and a clean close', async () => {
    await start({});
    const refused = await guest.connect(GW_IP, echo.port, 40001);
    expect(refused.tcp!.flags & TCP_RST).to.equal(TCP_RST);
    expect(audit).to.deep.include({
      event: 'deny',
      proto: 'tcp',
      addr: 'host',
      port: echo.port,
      name: 'host.svc.internal',
      decision: 'deny',
      rule: 'host-closed',
    });
    lan.setPolicy({ default: 'allow', allow: [`host:${echo.port}`], deny: [] });
    const synAck = await guest.connect(GW_IP, echo.port, 40002);
    expect(synAck.tcp!.flags).to.equal(TCP_SYN | TCP_ACK);
    expect(synAck.tcp!.ack).to.equal(1001);
    expect(synAck.tcp!.mss, 'our segment size').to.be.greaterThan(1460);
    guest.established(GW_IP, echo.port, 40002, synAck.tcp!, Buffer.from('hello host'));
    const back = await guest.next((f) => !!f.tcp && f.tcp.payload.length > 0);
    expect(back.tcp!.payload.toString()).to.equal('hello host');
    expect(back.tcp!.ack).to.equal(1011);
    guest.tcp(GW_IP, {
      srcPort: 40002,
      dstPort: echo.port,
      seq: 1011,
      ack: (back.tcp!.seq + 10) >>> 0,
      flags: TCP_FIN | TCP_ACK,
    });
    const fin = await guest.next(tcpFrom(echo.port, TCP_FIN));
    guest.tcp(GW_IP, { srcPort: 40002, dstPort: echo.port, seq: 1012, ack: (fin.tcp!.seq + 1) >>> 0, flags: TCP_ACK });
    await new Promise((r) => setTimeout(r, 100));
    expect(audit.find((e) => e.event === 'close')).to.include({
      proto: 'tcp',
      addr: 'host',
      bytes_out: 10,
      bytes_in: 10,
      rule: `host:${echo.port}`,
    });
    expect(lan.stats().tcp).to.equal(0);
  });

  it('closes a connection the new policy forbids at once, both ways', async () => {
    await start({ allow: [`host:${echo.port}`] });
    const synAck = await guest.connect(GW_IP, echo.port, 40003);
    guest.established(GW_IP, echo.port, 40003, synAck.tcp!);
    await new Promise((r) => setTimeout(r, 100));
    expect(echo.sockets).to.have.length(1);
    const closed = new Promise((r) => echo.sockets[0].once('close', r));
    lan.setPolicy({ default: 'allow', allow: [], deny: [] });
    expect((await guest.next(tcpFrom(echo.port, TCP_RST), 1000)).tcp!.flags & TCP_RST).to.equal(TCP_RST);
    await closed;
    expect(audit.at(-1)).to.include({ event: 'close', decision: 'deny', rule: 'host-closed' });
  });

  it("forwards a host port into the guest, as QEMU's hostfwd did (from the gateway)", async () => {
    await start({ default: 'deny' });
    const [fwd] = await lan.forwards.add([{ host_port: 0, guest_port: 8080, proto: 'tcp' }]);
    expect(fwd.host_port).to.be.greaterThan(0);
    const client = tcpConnect(fwd.host_port, '127.0.0.1');
    const received: Buffer[] = [];
    client.on('data', (d: Buffer) => received.push(d));
    const syn = await guest.next((f) => !!f.tcp && f.tcp.dstPort === 8080 && f.tcp.flags === TCP_SYN);
    expect(syn.ip!.src).to.equal(GW_IP);
    const gwPort = syn.tcp!.srcPort;
    guest.tcp(GW_IP, {
      srcPort: 8080,
      dstPort: gwPort,
      seq: 5000,
      ack: (syn.tcp!.seq + 1) >>> 0,
      flags: TCP_SYN | TCP_ACK,
      mss: 1460,
    });
    await guest.next((f) => !!f.tcp && f.tcp.dstPort === 8080 && f.tcp.flags === TCP_ACK);
    client.write('ping');
    const data = await guest.next((f) => !!f.tcp && f.tcp.dstPort === 8080 && f.tcp.payload.length > 0);
    expect(data.tcp!.payload.toString()).to.equal('ping');
    guest.tcp(
      GW_IP,
      { srcPort: 8080, dstPort: gwPort, seq: 5001, ack: (data.tcp!.seq + 4) >>> 0, flags: TCP_ACK | TCP_PSH },
      Buffer.from('pong'),
    );
    await poll(() => received.length > 0, { ms: 1000, every: 20 });
    expect(Buffer.concat(received).toString()).to.equal('pong');
    client.destroy();
    expect(lan.forwards.remove(fwd.host_port, 'tcp')).to.equal(true);
  });

  it('lets a connection made by name show only allowed names: HTTP Host and TLS SNI', async () => {
    await start({ default: 'deny', allow: ['allowed.test'] });
    guest.send(udpFrames(link, GUEST_IP, 5353, DNS_IP, 53, dnsQuery('allowed.test'), 1500)[0]);
    await guest.next((f) => f.udp?.dstPort === 5353);
    const tryWith = async (srcPort: number, first: Buffer) => {
      const synAck = await guest.connect(ipFrom(PUBLIC), 443, srcPort);
      expect(synAck.tcp!.flags, 'the address was resolved from an allowed name').to.equal(TCP_SYN | TCP_ACK);
      guest.established(ipFrom(PUBLIC), 443, srcPort, synAck.tcp!, first);
      return guest.next(
        (f) => !!f.tcp && f.tcp.dstPort === srcPort && (f.tcp.payload.length > 0 || (f.tcp.flags & TCP_RST) !== 0),
      );
    };
    const good = await tryWith(40010, Buffer.from('GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n'));
    expect(good.tcp!.payload.toString(), 'passed on to the server (which echoes)').to.match(/^GET \//);
    const badHost = await tryWith(40011, Buffer.from('GET / HTTP/1.1\r\nHost: other.test\r\n\r\n'));
    expect(badHost.tcp!.flags & TCP_RST).to.equal(TCP_RST);
    const badSni = await tryWith(40012, await clientHello('other.test'));
    expect(badSni.tcp!.flags & TCP_RST).to.equal(TCP_RST);
    expect(echo.got.map(String).join('')).not.to.include('other.test');
    expect(audit.filter((e) => e.event === 'deny').map((e) => [e.name, e.rule])).to.deep.equal([
      ['other.test', 'name-mismatch'],
      ['other.test', 'name-mismatch'],
    ]);
    // An address no allowed name gave is refused, and so is DNS elsewhere.
    expect((await guest.connect(ipFrom(OTHER), 443, 40013)).tcp!.flags & TCP_RST).to.equal(TCP_RST);
    guest.send(udpFrames(link, GUEST_IP, 5354, ipFrom('8.8.8.8'), 53, dnsQuery('allowed.test'), 1500)[0]);
    const icmp = await guest.next((f) => !!f.icmp);
    expect([icmp.icmp!.type, icmp.icmp!.code]).to.deep.equal([3, 13]);
    expect(audit.find((e) => e.proto === 'udp')).to.include({
      event: 'deny',
      addr: '8.8.8.8',
      port: 53,
      rule: 'dns-elsewhere',
    });
  });

  it("refuses a denied name's address even when the guest never asked for the name, and never dials the host's loopback for a name", async () => {
    await start({ default: 'allow', deny: ['denied.test'], allow: ['loop.test'] });
    await new Promise((r) => setTimeout(r, 200)); // the guard resolves deny rules' names itself
    const r = await guest.connect(ipFrom(OTHER), 80, 40020);
    expect(r.tcp!.flags & TCP_RST).to.equal(TCP_RST);
    expect(audit).to.deep.include({
      event: 'deny',
      proto: 'tcp',
      addr: OTHER,
      port: 80,
      name: 'denied.test',
      decision: 'deny',
      rule: 'denied.test',
    });
    guest.send(udpFrames(link, GUEST_IP, 5353, DNS_IP, 53, dnsQuery('loop.test'), 1500)[0]);
    await guest.next((f) => f.udp?.dstPort === 5353);
    const loop = await guest.connect(ipFrom('127.0.0.1'), echo.port, 40021);
    expect(loop.tcp!.flags & TCP_RST).to.equal(TCP_RST);
    expect(echo.sockets).to.have.length(0);
  });

  it('tunnels allowed connections through the SOCKS5 proxy: a name when a name let it out, else the address; never directly, and closed when the proxy fails', async () => {
    const socks = await new TestSocks(() => ({ host: '127.0.0.1', port: echo.port }), {
      user: 'u',
      password: 'pw-1',
    }).start();
    let password = 'pw-1';
    try {
      const proxy = { address: `127.0.0.1:${socks.port}`, username: 'u', secret: 'proxy-pw' };
      await start({ default: 'deny', allow: ['allowed.test', `${OTHER}:80`], proxy }, async (name) =>
        name === 'proxy-pw' ? Buffer.from(password) : undefined,
      );
      guest.send(udpFrames(link, GUEST_IP, 5353, DNS_IP, 53, dnsQuery('allowed.test'), 1500)[0]);
      await guest.next((f) => f.udp?.dstPort === 5353);
      const roundTrip = async (dst: string, port: number, srcPort: number, text: string) => {
        const synAck = await guest.connect(ipFrom(dst), port, srcPort);
        if (synAck.tcp!.flags & TCP_RST) return synAck;
        guest.established(ipFrom(dst), port, srcPort, synAck.tcp!, Buffer.from(text));
        return guest.next(
          (f) => !!f.tcp && f.tcp.dstPort === srcPort && (f.tcp.payload.length > 0 || (f.tcp.flags & TCP_RST) !== 0),
        );
      };
      const byName = await roundTrip(PUBLIC, 443, 40030, 'through by name');
      expect(byName.tcp!.payload.toString(), 'echoed through the proxy').to.equal('through by name');
      const byAddr = await roundTrip(OTHER, 80, 40031, 'through by address');
      expect(byAddr.tcp!.payload.toString()).to.equal('through by address');
      expect(socks.asked).to.deep.equal([
        { atyp: 3, host: 'allowed.test', port: 443, user: 'u', password: 'pw-1' },
        { atyp: 1, host: OTHER, port: 80, user: 'u', password: 'pw-1' },
      ]);
      // The policy decides before the proxy is asked: a refused destination never reaches it.
      expect((await guest.connect(ipFrom(OTHER), 443, 40032)).tcp!.flags & TCP_RST).to.equal(TCP_RST);
      expect(socks.asked).to.have.length(2);
      // A password the proxy refuses (the secret rotated on one side only): reset, logged, no direct dial.
      password = 'wrong';
      const connsBefore = echo.sockets.length;
      expect((await guest.connect(ipFrom(OTHER), 80, 40033)).tcp!.flags & TCP_RST).to.equal(TCP_RST);
      socks.stop();
      expect((await guest.connect(ipFrom(OTHER), 80, 40034)).tcp!.flags & TCP_RST).to.equal(TCP_RST);
      await new Promise((r) => setTimeout(r, 50));
      expect(echo.sockets.length, 'no connection went around the proxy').to.equal(connsBefore);
      const errors = audit.filter((e) => e.event === 'close' && e.error).map((e) => e.error);
      expect(errors).to.have.length(2);
      for (const e of errors) expect(e).to.match(new RegExp(`^SOCKS5 proxy 127.0.0.1:${socks.port}: `));
      expect(errors.join(' ')).not.to.include('wrong');
    } finally {
      socks.stop();
    }
  });

  it('carries UDP out and only the answers of the far end back', async () => {
    await start({ default: 'allow' });
    guest.send(udpFrames(link, GUEST_IP, 6000, ipFrom(PUBLIC), 7, Buffer.from('marco'), 1500)[0]);
    const back = await guest.next((f) => f.udp?.dstPort === 6000);
    expect(back.udp!.payload.toString()).to.equal('marco');
    expect(back.ip!.src).to.equal(ipFrom(PUBLIC));
    expect(audit.find((e) => e.proto === 'udp')).to.include({ event: 'open', addr: PUBLIC, port: 7, rule: 'default' });
    lan.setPolicy({ default: 'deny', allow: [], deny: [] });
    expect(lan.stats().udp, 'a flow the new policy forbids is closed').to.equal(0);
  });

  it('sends again what the guest did not acknowledge, and drops frames it cannot read', async () => {
    await start({ allow: [`host:${echo.port}`] });
    guest.send(Buffer.from('not a frame'));
    guest.send(Buffer.alloc(60, 0xff));
    const synAck = await guest.connect(GW_IP, echo.port, 40030);
    guest.established(GW_IP, echo.port, 40030, synAck.tcp!, Buffer.from('again'));
    const first = await guest.next((f) => !!f.tcp && f.tcp.payload.length > 0);
    const again = await guest.next((f) => !!f.tcp && f.tcp.payload.length > 0, 2000);
    expect(again.tcp!.seq, 'the same bytes, unacknowledged').to.equal(first.tcp!.seq);
    expect(again.tcp!.payload.toString()).to.equal('again');
    expect(lan.stats().bad_frames).to.be.greaterThan(0);
  });
});
