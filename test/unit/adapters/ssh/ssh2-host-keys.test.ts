import { expect } from 'chai';
import { connect, createServer, type AddressInfo, type Server } from 'node:net';
import ssh2 from 'ssh2';
import { generateEd25519 } from '../../../../src/adapters/ssh/keygen.js';
import { Ssh2HostKeys } from '../../../../src/adapters/ssh/ssh2-host-keys.js';
import { AgentFailureError } from '../../../../src/domain/errors.js';

const listen = (s: Server | ssh2.Server) =>
  new Promise<number>((r) => s.listen(0, '127.0.0.1', () => r((s.address() as AddressInfo).port)));

describe('adapters/ssh/Ssh2HostKeys: the host key a guest SSH server shows', () => {
  const ed = generateEd25519();
  const ecdsa = ssh2.utils.generateKeyPairSync('ecdsa', { bits: 256 });
  const logins: string[] = [];
  const server = new ssh2.Server({ hostKeys: [ecdsa.private, ed.private] }, (client) => {
    client.on('error', () => undefined);
    client.on('authentication', (ctx) => {
      logins.push(ctx.username);
      ctx.reject();
    });
  });
  let port: number;
  before(async () => (port = await listen(server)));
  after(() => server.close());
  const fields = (line: string) => line.trim().split(' ').slice(0, 2).join(' ');

  it('reads the ed25519 key of a server that has others too, and never logs in', async () => {
    const key = await new Ssh2HostKeys().read(connect(port, '127.0.0.1'));
    expect(key).to.equal(fields(ed.public));
    expect(logins).to.deep.equal([]);
  });

  it('reads the key of the type asked for', async () => {
    const key = await new Ssh2HostKeys().read(connect(port, '127.0.0.1'), 5000, ['ecdsa-sha2-nistp256']);
    expect(key).to.equal(fields(ecdsa.public));
  });

  it('fails, saying why, on a peer that is not an SSH server and on one that says nothing', async () => {
    const rude = createServer((s) => s.end('HTTP/1.1 400 Bad Request\r\n\r\n'));
    const silent = createServer(() => undefined);
    const [rudePort, silentPort] = [await listen(rude), await listen(silent)];
    try {
      const a = await new Ssh2HostKeys().read(connect(rudePort, '127.0.0.1'), 5000).catch((e: Error) => e);
      expect(a).to.be.instanceOf(AgentFailureError);
      expect((a as Error).message).to.match(/^no SSH host key from the guest: /);
      const t0 = Date.now();
      const b = await new Ssh2HostKeys().read(connect(silentPort, '127.0.0.1'), 300).catch((e: Error) => e);
      expect(b).to.be.instanceOf(AgentFailureError);
      expect((b as Error).message).to.match(/within 300 ms|Timed out/);
      expect(Date.now() - t0).to.be.below(3000);
    } finally {
      rude.close();
      silent.close();
    }
  });
});
