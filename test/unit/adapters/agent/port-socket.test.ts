import { expect } from 'chai';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer, type AddressInfo, type Server as NetServer } from 'node:net';
import { upgradeToPort } from '../../../../src/adapters/agent/port-socket.js';
import { HttpGuestAgent } from '../../../../src/adapters/guest-link/http-guest-agent.js';
import { parseGuestPort } from '../../../../src/domain/agent.js';
import { InvalidArgumentError, NotFoundError } from '../../../../src/domain/errors.js';

const listen = <T extends Server | NetServer>(s: T): Promise<number> =>
  new Promise((r) => s.listen(0, '127.0.0.1', () => r((s.address() as AddressInfo).port)));

describe("adapters/agent/port-socket: a guest's TCP port through the agent", () => {
  let agentSrv: Server;
  let echo: NetServer;
  let ep: { host: string; port: number };
  let echoPort: number;
  const agent = new HttpGuestAgent();

  before(async () => {
    agentSrv = createHttpServer((_req, res) => res.writeHead(404).end());
    agentSrv.on('upgrade', upgradeToPort);
    ep = { host: '127.0.0.1', port: await listen(agentSrv) };
    echo = createServer((s) => s.on('data', (d: Buffer) => s.write(`<${d.toString()}>`)));
    echoPort = await listen(echo);
  });
  after(() => {
    agentSrv.closeAllConnections();
    agentSrv.close();
    echo.close();
    agent.close();
  });

  it('carries bytes both ways, and closing one side closes the other', async () => {
    const s = await agent.openPort(ep, echoPort);
    s.write('ping');
    const got = await new Promise<string>((r) => s.once('data', (d: Buffer) => r(d.toString())));
    expect(got).to.equal('<ping>');
    const closed = new Promise<number>((r) => echo.getConnections((_e, n) => r(n)));
    expect(await closed).to.equal(1);
    s.destroy();
    for (let i = 0; i < 50; i++) {
      const n = await new Promise<number>((r) => echo.getConnections((_e, c) => r(c)));
      if (n === 0) return;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect.fail("the guest's connection stayed open after the caller closed");
  });

  it('says nothing listens on a closed port, and refuses a bad port', async () => {
    const closed = createServer();
    const port = await listen(closed);
    await new Promise((r) => closed.close(r));
    const err = await agent.openPort(ep, port).catch((e: Error) => e);
    expect(err)
      .to.be.instanceOf(NotFoundError)
      .with.property('message')
      .match(new RegExp(`nothing listens on port ${port}`));
    expect(await agent.openPort(ep, 70000).catch((e: Error) => e)).to.be.instanceOf(InvalidArgumentError);
  });

  it('reads ports as 1 to 65535, digits only', () => {
    expect(parseGuestPort('8080')).to.equal(8080);
    for (const bad of ['0', '65536', '-1', '80a', '', ' 80', '1e3'])
      expect(() => parseGuestPort(bad), bad).to.throw(InvalidArgumentError);
  });
});
