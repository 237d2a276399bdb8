import { expect } from 'chai';
import fc from 'fast-check';
import { createServer, type AddressInfo } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { readDhcp } from '../../../../src/adapters/netd/dhcp.js';
import { answerWith, BadDns, blocked, readAnswers, readQuestion } from '../../../../src/adapters/netd/dns-message.js';
import {
  BadFrame,
  fold,
  ipFrom,
  readArp,
  readEth,
  readIcmp,
  readIpv4,
  readTcp,
  readUdp,
  sum16,
  tcpFrame,
  TCP_ACK,
  TCP_SYN,
  udpFrames,
} from '../../../../src/adapters/netd/packets.js';
import { sniff } from '../../../../src/adapters/netd/sniff.js';
import { dnsQuery } from '../../../helpers/dns-server.js';

const runs = Number(process.env.SVC_FUZZ_RUNS ?? 300);
const link = { dstMac: Buffer.from('525400123456', 'hex'), srcMac: Buffer.from('52550a000202', 'hex') };

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
  tlsConnect({
    host: '127.0.0.1',
    port: (srv.address() as AddressInfo).port,
    servername,
    rejectUnauthorized: false,
  }).on('error', () => undefined);
  const hello = await got;
  srv.close();
  return hello;
}

describe('adapters/netd codecs', function () {
  this.timeout(20_000); // property tests run many cases; nothing here is timed
  it('reads the server name of a real ClientHello, whole or arriving in pieces', async () => {
    const hello = await clientHello('api.example.com');
    expect(sniff(hello)).to.deep.equal({ kind: 'tls', name: 'api.example.com' });
    expect(sniff(hello.subarray(0, 3))).to.deep.equal({ kind: 'more' });
    expect(sniff(hello.subarray(0, hello.length - 1))).to.deep.equal({ kind: 'more' });
  });

  it("reads an HTTP request's host (header, absolute target, CONNECT) and lets other protocols be", () => {
    expect(sniff(Buffer.from('GET / HTTP/1.1\r\nhOsT: Example.com:8080\r\n\r\n'))).to.deep.equal({
      kind: 'http',
      name: 'Example.com',
    });
    expect(sniff(Buffer.from('GET http://a.test/x HTTP/1.1\r\nX: y\r\n\r\n'))).to.deep.equal({
      kind: 'http',
      name: 'a.test',
    });
    expect(sniff(Buffer.from('CONNECT b.test:443 HTTP/1.1\r\n\r\n'))).to.deep.equal({ kind: 'http', name: 'b.test' });
    expect(sniff(Buffer.from('GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n'))).to.deep.equal({
      kind: 'http',
      name: '2001:db8::1',
    });
    expect(sniff(Buffer.from('GET / HTTP/1.1\r\nHost: a'))).to.deep.equal({ kind: 'more' });
    expect(sniff(Buffer.from('GE'))).to.deep.equal({ kind: 'more' });
    expect(sniff(Buffer.from('SSH-2.0-OpenSSH_9.2\r\n'))).to.deep.equal({ kind: 'other' });
    expect(sniff(Buffer.from([0x16, 0x03, 0x01, 0x00, 0x05, 0x02, 0, 0, 1, 0]))).to.deep.equal({ kind: 'other' });
  });

  it("reads DNS questions and answers, makes refusals and the host's answers", () => {
    const q = readQuestion(dnsQuery('WWW.Example.COM', 42, 28, true));
    expect(q).to.include({ id: 42, name: 'www.example.com', type: 28, edns: true, rd: true });
    const a = answerWith(readQuestion(dnsQuery('host.svc.internal', 9)), [ipFrom('10.0.2.2')], 60);
    expect(readAnswers(a)).to.deep.equal({ a: ['10.0.2.2'], ttl: 60 });
    expect(a.readUInt16BE(0)).to.equal(9);
    const refusal = blocked(q, 'refused by policy');
    expect(refusal[3] & 15, 'NXDOMAIN').to.equal(3);
    expect(refusal.readUInt16BE(10), 'an OPT record with the extended error').to.equal(1);
    expect(refusal.subarray(-17).toString()).to.equal('refused by policy');
    expect(blocked(readQuestion(dnsQuery('x.test')), 'no').readUInt16BE(10), 'no EDNS: no OPT').to.equal(0);
    // A compression pointer that points at itself, and a name past the end.
    const loop = Buffer.concat([dnsQuery('a.test').subarray(0, 12), Buffer.from([0xc0, 12, 0, 1, 0, 1])]);
    expect(() => readQuestion(loop)).to.throw(BadDns);
    expect(() => readQuestion(Buffer.concat([dnsQuery('a.test').subarray(0, 12), Buffer.from([40, 97])]))).to.throw(
      BadDns,
    );
  });

  it("writes frames whose checksums verify, and fragments a datagram larger than the guest's MTU", () => {
    const syn = tcpFrame(link, ipFrom('10.0.2.2'), ipFrom('10.0.2.15'), {
      srcPort: 80,
      dstPort: 4000,
      seq: 1,
      ack: 2,
      flags: TCP_SYN | TCP_ACK,
      window: 65535,
      mss: 65000,
      wscale: 7,
    });
    const ip = readIpv4(readEth(syn).payload);
    expect(fold(sum16(ip.header))).to.equal(0);
    const pseudo = Buffer.alloc(12);
    pseudo.writeUInt32BE(ip.src, 0);
    pseudo.writeUInt32BE(ip.dst, 4);
    pseudo[9] = 6;
    pseudo.writeUInt16BE(ip.payload.length, 10);
    expect(fold(sum16(ip.payload, 0, ip.payload.length, sum16(pseudo))), 'tcp checksum').to.equal(0);
    expect(readTcp(ip.payload)).to.include({
      srcPort: 80,
      seq: 1,
      ack: 2,
      mss: 65000,
      wscale: 7,
      flags: TCP_SYN | TCP_ACK,
    });
    const big = Buffer.alloc(4000, 7);
    const frames = udpFrames(link, ipFrom('10.0.2.3'), 53, ipFrom('10.0.2.15'), 5353, big, 1500);
    expect(frames).to.have.length(3);
    const pieces = frames.map((f) => readIpv4(readEth(f).payload));
    for (const p of pieces) expect(fold(sum16(p.header))).to.equal(0);
    expect(pieces.every((p) => p.fragment)).to.equal(true);
    const whole = Buffer.concat(pieces.map((p) => p.payload));
    expect(readUdp(whole).payload.equals(big)).to.equal(true);
    expect(frames.every((f) => f.length - 14 <= 1500)).to.equal(true);
    void TCP_ACK;
  });

  it('every reader refuses made-up bytes with its own error, never another (property)', () => {
    const known = (err: unknown) => err instanceof BadFrame || err instanceof BadDns;
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
        const b = Buffer.from(bytes);
        for (const read of [readEth, readArp, readIpv4, readTcp, readUdp, readIcmp, readQuestion, readAnswers]) {
          try {
            read(b);
          } catch (err) {
            if (!known(err)) throw err;
          }
        }
        readDhcp(b);
        expect(['tls', 'http', 'other', 'more']).to.include(sniff(b).kind);
      }),
      { numRuns: runs * 5 },
    );
  });
});
