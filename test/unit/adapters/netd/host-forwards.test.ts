import { expect } from 'chai';
import { createSocket, type Socket as DgramSocket } from 'node:dgram';
import { connect, type Socket } from 'node:net';
import { once } from 'node:events';
import { HostForwards } from '../../../../src/adapters/netd/host-forwards.js';
import { waitUntil } from '../../../helpers/wait.js';

describe('adapters/netd/host-forwards: host ports into a guest, and the gateway ports they come from', () => {
  const tcpIn: { guestPort: number; sock: Socket }[] = [];
  const udpIn: { gwPort: number; guestPort: number; msg: string }[] = [];
  let fw: HostForwards;
  const clients: DgramSocket[] = [];
  beforeEach(() => {
    tcpIn.length = 0;
    udpIn.length = 0;
    fw = new HostForwards({
      tcpIn: (sock, guestPort) => {
        tcpIn.push({ guestPort, sock });
        sock.destroy();
      },
      udpIn: (gwPort, guestPort, msg) => udpIn.push({ gwPort, guestPort, msg: msg.toString() }),
    });
  });
  afterEach(() => {
    fw.close();
    for (const c of clients.splice(0)) c.close();
  });
  const refused = (port: number) =>
    new Promise<string>((resolve) => {
      const s = connect(port, '127.0.0.1');
      s.on('connect', () => {
        s.destroy();
        resolve('connected');
      });
      s.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'));
    });
  const udpClient = async () => {
    const c = createSocket('udp4');
    clients.push(c);
    await new Promise<void>((r) => c.bind(0, '127.0.0.1', () => r()));
    return c;
  };
  const until = (cond: () => boolean) => waitUntil(cond.toString(), cond, { ms: 1000, every: 5 });

  it('binds a TCP forward, hands its connections over for the guest port, and lets it go', async () => {
    const [f] = await fw.add([{ host_port: 0, guest_port: 8080, proto: 'tcp' }]);
    expect(f.host_port).to.be.above(0);
    expect(fw.list()).to.deep.equal([f]);
    expect(await refused(f.host_port)).to.equal('connected');
    await until(() => tcpIn.length === 1);
    expect(tcpIn[0].guestPort).to.equal(8080);
    // The same forward again is the one there; another guest port on that host port is refused.
    expect(await fw.add([{ ...f }])).to.deep.equal([f]);
    const err = await fw.add([{ ...f, guest_port: 9090 }]).catch((e: NodeJS.ErrnoException) => e);
    expect(err).to.include({ code: 'EADDRINUSE' });
    expect(fw.remove(f.host_port, 'tcp')).to.equal(true);
    expect(fw.remove(f.host_port, 'tcp')).to.equal(false);
    expect(fw.list()).to.deep.equal([]);
    expect(await refused(f.host_port)).to.equal('ECONNREFUSED');
  });

  it('binds none of a list when one of it fails', async () => {
    const [taken] = await fw.add([{ host_port: 0, guest_port: 1, proto: 'tcp' }]);
    const err = await fw
      .add([
        { host_port: 0, guest_port: 2, proto: 'tcp' },
        { host_port: taken.host_port, guest_port: 3, proto: 'tcp' },
      ])
      .catch((e: Error) => e);
    expect(err).to.be.instanceOf(Error);
    expect(fw.list()).to.deep.equal([taken]);
  });

  it('gives each UDP client a gateway port of its own, and carries the guest answer back to it', async () => {
    const [f] = await fw.add([{ host_port: 0, guest_port: 53, proto: 'udp' }]);
    const a = await udpClient();
    const b = await udpClient();
    a.send('a1', f.host_port, '127.0.0.1');
    await until(() => udpIn.length === 1);
    a.send('a2', f.host_port, '127.0.0.1');
    await until(() => udpIn.length === 2);
    b.send('b1', f.host_port, '127.0.0.1');
    await until(() => udpIn.length === 3);
    const [a1, a2, b1] = udpIn;
    expect([a1.msg, a2.msg, b1.msg]).to.deep.equal(['a1', 'a2', 'b1']);
    expect(a1.guestPort).to.equal(53);
    expect(a2.gwPort, 'one client, one gateway port').to.equal(a1.gwPort);
    expect(b1.gwPort, 'another client, another').to.not.equal(a1.gwPort);
    const answered = once(b, 'message');
    expect(fw.answer(b1.gwPort, Buffer.from('to-b'))).to.equal(true);
    expect(String((await answered)[0])).to.equal('to-b');
    expect(fw.answer(1, Buffer.from('x')), 'a port no client has').to.equal(false);
  });

  it('hands out gateway ports no one holds, and one again once it is let go', () => {
    const first = fw.allocPort();
    const seen = new Set([first]);
    for (let i = 0; i < 24_999; i++) seen.add(fw.allocPort());
    expect(seen.size).to.equal(25_000);
    expect(() => fw.allocPort()).to.throw(/no gateway port free/);
    fw.releasePort(first + 7);
    expect(fw.allocPort()).to.equal(first + 7);
  });
});
