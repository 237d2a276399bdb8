import { expect } from 'chai';
import { startLocalAgent, type LocalAgent } from '../../src/adapters/hypervisor/fake/local-agent-process.js';
import { call, rawRequest as raw } from '../helpers/http.js';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';

const ws =
  'connection: upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n';

/**
 * Request targets Node's HTTP parser lets through but no URL parser takes (`http://[`), and
 * malformed percent-encoding, on the routes that no framework guards: the WebSocket and port
 * upgrades. One of them used to stop the daemon (an exception nobody caught), without a token.
 */
describe('request targets no URL parser takes, on upgrades', function () {
  this.timeout(60_000);
  let d: TestDaemon;
  let agent: LocalAgent;
  before(async () => {
    d = await startTestDaemon();
    agent = await startLocalAgent(tempDir('svc-targets-agent-'));
  });
  after(async () => {
    await agent.stop();
    await d.stop();
  });

  it('the daemon answers 400 and goes on serving, with or without a token', async () => {
    const port = d.tcp.port!;
    const host = `host: 127.0.0.1:${port}\r\n`;
    for (const [target, token] of [
      ['http://[', ''],
      ['http://[::1/vms/a/shell', ''],
      ['http://%zz/vms/a/shell', 'authorization: Bearer test-token\r\n'],
      ['/vms/%zz/shell', 'authorization: Bearer test-token\r\n'],
      ['/vms/a/ports/%zz', 'authorization: Bearer test-token\r\n'],
    ]) {
      const line = await raw(port, `GET ${target} HTTP/1.1\r\n${host}${token}${ws}\r\n`);
      expect(line, target).to.match(/^HTTP\/1\.1 4\d\d /);
      if (target.includes('%zz')) expect(line, target).to.match(/ 400 /);
      expect((await call(d.tcp, 'GET', '/healthz')).status, `still up after ${target}`).to.equal(200);
    }
    // Without an upgrade: express's routes, a path parameter that cannot be decoded is the caller's mistake.
    for (const [method, path] of [
      ['GET', '/vms/%zz'],
      ['POST', '/vms/%E0%A4%A/exec?cmd=true'],
      ['GET', '/images/%zz'],
    ]) {
      const r = await call(d.tcp, method, path);
      expect(r.status, path).to.equal(400);
      expect(r.json, path).to.include({ code: 'invalid_argument' });
    }
    expect(await raw(port, `GET http://[ HTTP/1.1\r\n${host}\r\n`)).to.match(/^HTTP\/1\.1 4\d\d /);
    expect((await call(d.tcp, 'GET', '/healthz')).status).to.equal(200);
  });

  it('the guest agent answers 400 and goes on serving', async () => {
    for (const target of ['http://[', 'http://[::1/shell']) {
      const line = await raw(agent.port, `GET ${target} HTTP/1.1\r\nhost: 127.0.0.1\r\n${ws}\r\n`);
      expect(line, target).to.match(/^HTTP\/1\.1 400 /);
      expect((await call({ port: agent.port }, 'GET', '/health')).status, `still up after ${target}`).to.equal(200);
    }
  });
});
