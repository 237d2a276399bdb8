import { expect } from 'chai';
import WebSocket from 'ws';
import { call } from '../helpers/http.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

/** What a web page can do to a daemon on loopback with the default config (no token). */
describe('browser safety of the TCP listener (default config, no token)', function () {
  this.timeout(30_000);
  let d: TestDaemon;
  let port: number;
  before(async () => {
    d = await startTestDaemon({
      api_token: '',
      allowed_hosts: ['svc.internal'],
      allowed_origins: ['http://localhost:3000'],
    });
    port = d.tcp.port!;
  });
  after(async () => d.stop());
  const tcp = (method: string, path: string, headers: Record<string, string>, body?: unknown) =>
    call({ port }, method, path, body, headers);
  const vms = async () => ((await d.call('GET', '/vms')).json as { name: string }[]).map((v) => v.name);

  it('refuses a change from a foreign Origin with 403, and nothing changes', async () => {
    for (const origin of [
      'http://evil.example',
      'null',
      `http://127.0.0.1:${port + 1}`,
      'http://localhost.evil.example',
    ]) {
      const r = await tcp('POST', '/vms', { origin }, { name: 'pwned' });
      expect(r.status, origin).to.equal(403);
      expect(r.json).to.include({ code: 'permission_denied' });
      expect(r.json.error).to.match(/Origin .* may not change anything here; add it to allowed_origins/);
    }
    expect((await tcp('POST', '/vms/x/exec?cmd=id', { origin: 'http://evil.example' })).status).to.equal(403);
    expect((await tcp('DELETE', '/vms/x', { origin: 'https://evil.example' })).status).to.equal(403);
    expect(await vms()).to.deep.equal([]);
  });

  it('refuses a cross-site browser request that carries no Origin', async () => {
    expect((await tcp('POST', '/vms', { 'sec-fetch-site': 'cross-site' }, { name: 'pwned' })).status).to.equal(403);
    expect(await vms()).to.deep.equal([]);
  });

  it('refuses a Host that is not one of its names (DNS rebinding), for reads too', async () => {
    for (const host of [`evil.example:${port}`, 'evil.example', `127.0.0.1.evil.example:${port}`, 'a b']) {
      const r = await tcp('GET', '/vms', { host });
      expect(r.status, host).to.equal(403);
    }
    expect((await tcp('GET', '/vms', { host: `evil.example:${port}` })).json.error).to.match(
      /is not a name of this daemon; add it to allowed_hosts/,
    );
  });

  it('serves its own names, the configured ones, its own origin and allowed origins', async () => {
    for (const host of [
      `127.0.0.1:${port}`,
      `localhost:${port}`,
      `LOCALHOST:${port}`,
      `[::1]:${port}`,
      `svc.internal:${port}`,
    ]) {
      expect((await tcp('GET', '/vms', { host })).status, host).to.equal(200);
    }
    expect((await tcp('POST', '/vms', { origin: `http://127.0.0.1:${port}` }, { name: 'own' })).status).to.equal(201);
    expect(
      (await tcp('POST', '/vms', { host: `localhost:${port}`, origin: `http://localhost:${port}` }, { name: 'own2' }))
        .status,
    ).to.equal(201);
    expect((await tcp('POST', '/vms', { origin: 'http://localhost:3000' }, { name: 'allowed' })).status).to.equal(201);
    // curl, the CLI and SDKs send no Origin
    expect((await tcp('POST', '/vms', {}, { name: 'curl' })).status).to.equal(201);
    // a cross-origin read is left to the browser's same-origin policy (no CORS headers are sent)
    const read = await tcp('GET', '/vms', { origin: 'http://evil.example' });
    expect(read.status).to.equal(200);
    expect(read.headers['access-control-allow-origin']).to.equal(undefined);
    expect((await vms()).sort()).to.deep.equal(['allowed', 'curl', 'own', 'own2']);
  });

  it('refuses a WebSocket upgrade from a foreign Origin before it reaches the shell', async () => {
    const open = (origin?: string) =>
      new Promise<number>((resolve) => {
        const ws = new WebSocket(`ws://127.0.0.1:${port}/vms/curl/shell`, origin ? { origin } : {});
        ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
        ws.on('open', () => {
          ws.close();
          resolve(101);
        });
        ws.on('error', () => resolve(-1));
      });
    expect(await open('http://evil.example')).to.equal(403);
    expect(await open(`http://127.0.0.1:${port + 1}`)).to.equal(403);
    // without a foreign Origin the upgrade reaches the shell proxy (a fake VM with no agent: 501)
    expect(await open()).to.be.oneOf([101, 501]);
  });

  it('keeps the Unix socket open to any Host and Origin (browsers cannot reach it)', async () => {
    expect((await d.call('GET', '/vms', undefined, { host: 'svc' })).status).to.equal(200);
    expect(
      (await d.call('POST', '/vms', { name: 'unix' }, { host: 'evil.example', origin: 'http://evil.example' })).status,
    ).to.equal(201);
  });
});
