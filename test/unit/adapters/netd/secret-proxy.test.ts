import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import http from 'node:http';
import http2 from 'node:http2';
import { readFileSync } from 'node:fs';
import { connect as netConnect, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { placeholderOf, type EgressSecretBinding } from '../../../../src/domain/egress-secrets.js';
import { duplexPair } from '../../../../src/adapters/netd/duplex-pair.js';
import { EgressCa, ensureEgressCa } from '../../../../src/adapters/netd/egress-ca.js';
import type { EgressEntry } from '../../../../src/adapters/netd/egress-guard.js';
import { LeakScanner } from '../../../../src/adapters/netd/leak-scan.js';
import { EgressSecrets } from '../../../../src/adapters/netd/secret-proxy.js';
import { ProxyDialer } from '../../../../src/adapters/netd/socks-dial.js';
import { TestSocks } from '../../../helpers/socks-server.js';
import { tempDir } from '../../../helpers/daemon.js';

type Echo = { method: string; url: string; version: string; headers: Record<string, string> };

describe('adapters/netd/secret-proxy: egress secrets put in on the way out', function () {
  this.timeout(20_000);
  const dir = tempDir();
  const OPENAI = placeholderOf(randomBytes(20));
  const OTHER = placeholderOf(randomBytes(20));
  const values = new Map<string, string>([
    ['openai', 'sk-real-1\n'],
    ['other', 'other-value'],
    ['key', 'key-value'],
    ['token', 'token-value'],
    ['wild', 'wild-value'],
  ]);
  let upstream: http2.Http2SecureServer;
  let port = 0;
  let upstreamCaPem = '';
  let vmCaPem = '';
  let audit: EgressEntry[];
  let secrets: EgressSecrets;
  let seen: Echo[];
  const upstreamSockets: Socket[] = [];
  /** The placeholder of the VM this one was copied from (its processes hold it). */
  const INHERITED = placeholderOf(randomBytes(20));
  const bindings: EgressSecretBinding[] = [
    { secret: 'openai', hosts: ['api.test'], placeholder: OPENAI, inherited: [INHERITED] },
    { secret: 'other', hosts: ['elsewhere.test'], header: 'X-Key', placeholder: OTHER },
  ];

  before(async () => {
    const upCa = new EgressCa(join(dir, 'upstream-ca'), 'upstream');
    const ctx = await upCa.contextFor('api.test');
    upstreamCaPem = readFileSync(join(dir, 'upstream-ca.crt'), 'utf8');
    vmCaPem = await ensureEgressCa(join(dir, 'vm-ca'), 'v');
    upstream = http2.createSecureServer({ allowHTTP1: true, SNICallback: (_n, cb) => cb(null, ctx) }, (req, res) => {
      const echo = { method: req.method, url: req.url, version: req.httpVersion, headers: req.headers } as Echo;
      seen.push(echo);
      req.resume();
      req.on('end', () => {
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify(echo));
      });
    });
    upstream.on('upgrade', (req: http.IncomingMessage, sock: Socket) => {
      sock.write(
        `HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\nX-Auth: ${req.headers.authorization}\r\n\r\n`,
      );
      sock.pipe(sock);
    });
    upstream.on('connection', (s: Socket) => upstreamSockets.push(s));
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', () => r()));
    port = (upstream.address() as AddressInfo).port;
  });
  after(() => {
    upstream.close();
    for (const s of upstreamSockets) s.destroy();
  });
  afterEach(() => secrets.close());
  beforeEach(() => {
    audit = [];
    seen = [];
    secrets = new EgressSecrets({
      vm: 'v',
      bindings,
      ca: new EgressCa(join(dir, 'vm-ca'), 'v'),
      values: { value: async (n) => (values.has(n) ? Buffer.from(values.get(n)!) : undefined) },
      trust: [upstreamCaPem],
      audit: (e) => audit.push(e),
    });
  });

  /** A guest's TLS connection to api.test through the injection (what GuestLan hands over). */
  async function guestTls(alpn: string[], trust = vmCaPem, reopen?: () => Duplex): Promise<TLSSocket> {
    const raw = netConnect({ host: '127.0.0.1', port });
    await new Promise((r) => raw.once('connect', r));
    const [app, proxyEnd] = duplexPair();
    secrets.intercept({
      guest: proxyEnd,
      upstream: raw,
      tls: true,
      name: 'api.test',
      alpn,
      addr: '127.0.0.1',
      to: { host: '127.0.0.1', port },
      reopen,
    });
    const t = tlsConnect({ socket: app, servername: 'api.test', ca: trust, ALPNProtocols: alpn });
    await new Promise<void>((resolve, reject) => {
      t.once('secureConnect', () => resolve());
      t.once('error', reject);
      t.once('close', () => reject(new Error('closed before the handshake')));
    });
    return t;
  }

  const agents = new WeakMap<TLSSocket, http.Agent>();
  function h1(t: TLSSocket, headers: Record<string, string>, path = '/v1'): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      // One agent per connection: requests follow one another on it, as a client's would.
      let agent = agents.get(t);
      if (!agent) {
        agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
        agent.createConnection = () => t;
        agents.set(t, agent);
      }
      const req = http.request({ agent, path, method: 'POST', headers: { host: 'api.test', ...headers } }, (res) => {
        let body = '';
        res.on('data', (d) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
      });
      req.on('error', reject);
      req.end('{"model":"x"}');
    });
  }

  it('puts the value in for its host over HTTP/1.1 (TLS checked both ways), reads it again on each request', async () => {
    const t = await guestTls(['http/1.1']);
    expect(t.alpnProtocol).to.equal('http/1.1');
    const first = await h1(t, { authorization: `Bearer ${OPENAI}`, 'x-plain': 'kept' });
    expect(first.status).to.equal(200);
    const echo = JSON.parse(first.body) as Echo;
    expect(echo.headers.authorization, 'the value, its trailing newline dropped').to.equal('Bearer sk-real-1');
    expect(echo.headers['x-plain']).to.equal('kept');
    expect(echo.url).to.equal('/v1');
    values.set('openai', 'sk-real-2');
    const second = await h1(t, { authorization: `Bearer ${OPENAI}` });
    expect((JSON.parse(second.body) as Echo).headers.authorization, 'rotation takes the next request').to.equal(
      'Bearer sk-real-2',
    );
    values.set('openai', 'sk-real-1\n');
    const copied = await h1(t, { authorization: `Bearer ${INHERITED}` });
    expect((JSON.parse(copied.body) as Echo).headers.authorization, 'an inherited placeholder too').to.equal(
      'Bearer sk-real-1',
    );
    expect(audit.filter((e) => e.event === 'secret').map((e) => [e.secret, e.name])).to.deep.equal([
      ['openai', 'api.test'],
      ['openai', 'api.test'],
      ['openai', 'api.test'],
    ]);
    expect(JSON.stringify(audit)).not.to.include('sk-real');
    t.destroy();
  });

  it('speaks HTTP/2 to the guest when the upstream does', async () => {
    const t = await guestTls(['h2', 'http/1.1']);
    expect(t.alpnProtocol).to.equal('h2');
    const session = http2.connect('https://api.test', { createConnection: () => t });
    const body = await new Promise<string>((resolve, reject) => {
      const s = session.request({ ':path': '/h2', ':method': 'GET', authorization: `Bearer ${OPENAI}` });
      let b = '';
      s.on('data', (d) => (b += d));
      s.on('end', () => resolve(b));
      s.on('error', reject);
    });
    const echo = JSON.parse(body) as Echo;
    expect(echo.version).to.equal('2.0');
    expect(echo.headers.authorization).to.equal('Bearer sk-real-1');
    session.close();
  });

  it('refuses a placeholder for a host it is not for (403, logged), and one outside its header', async () => {
    const t = await guestTls(['http/1.1']);
    const r = await h1(t, { 'x-key': OTHER });
    expect(r.status).to.equal(403);
    expect(r.body).to.include('secret other').and.include('elsewhere.test');
    expect(seen, 'nothing reached the upstream').to.have.length(0);
    expect(audit).to.deep.include({
      event: 'deny',
      proto: 'tcp',
      addr: '127.0.0.1',
      port,
      name: 'api.test',
      decision: 'deny',
      rule: 'egress-secret',
      secret: 'other',
      error: 'its placeholder in header x-key',
    });
    const t2 = await guestTls(['http/1.1']);
    const inUrl = await h1(t2, {}, `/v1?key=${OPENAI}x`);
    expect(inUrl.status, 'never put into a URL, and not sent there').to.equal(403);
    const t3 = await guestTls(['http/1.1']);
    const otherHost = await h1(t3, { host: 'evil.test', authorization: OPENAI });
    expect(otherHost.status, 'a Host that is not the name TLS proved').to.equal(403);
  });

  it("sets an always binding's header on every request to its host, over the guest's own, most specific pattern only", async () => {
    const always: EgressSecretBinding[] = [
      { secret: 'key', hosts: ['api.test'], header: 'X-Api-Key', always: true, placeholder: OTHER },
      {
        secret: 'token',
        hosts: ['api.test'],
        header: 'Authorization',
        format: 'Bearer {value}',
        always: true,
        placeholder: placeholderOf(randomBytes(20)),
      },
      {
        secret: 'wild',
        hosts: ['*.test'],
        header: 'X-Wild',
        always: true,
        placeholder: placeholderOf(randomBytes(20)),
      },
    ];
    secrets.update([bindings[0], ...always]);
    const t = await guestTls(['http/1.1']);
    const r = await h1(t, { authorization: 'Bearer the-guest-own', 'X-API-KEY': 'guest', 'x-plain': 'kept' });
    const echo = JSON.parse(r.body) as Echo;
    expect(echo.headers.authorization, "the guest's header replaced").to.equal('Bearer token-value');
    expect(echo.headers['x-api-key'], 'one header, the value').to.equal('key-value');
    expect(echo.headers['x-plain']).to.equal('kept');
    expect(echo.headers['x-wild'], 'a wildcard loses to the exact name').to.equal(undefined);
    const t2 = await guestTls(['h2', 'http/1.1']);
    const session = http2.connect('https://api.test', { createConnection: () => t2 });
    const body = await new Promise<string>((resolve, reject) => {
      const s = session.request({ ':path': '/h2', ':method': 'GET' });
      let b = '';
      s.on('data', (d) => (b += d));
      s.on('end', () => resolve(b));
      s.on('error', reject);
    });
    expect((JSON.parse(body) as Echo).headers).to.include({
      'x-api-key': 'key-value',
      authorization: 'Bearer token-value',
    });
    session.close();
    secrets.update([always[2]]);
    const t3 = await guestTls(['http/1.1']);
    const wild = JSON.parse((await h1(t3, {})).body) as Echo;
    expect(wild.headers['x-wild']).to.equal('wild-value');
    expect(audit.filter((e) => e.event === 'secret').map((e) => e.secret)).to.deep.equal([
      'key',
      'token',
      'key',
      'token',
      'wild',
    ]);
    expect(JSON.stringify(audit)).not.to.include('-value');
    t.destroy();
    t3.destroy();
  });

  it("opens the upstream's next connection the way the first was made: through the VM's SOCKS5 proxy", async () => {
    const socks = await new TestSocks(() => ({ host: '127.0.0.1', port })).start();
    try {
      const dialer = new ProxyDialer(
        { address: `127.0.0.1:${socks.port}` },
        { host: 'api.test', port },
        undefined,
        5000,
      );
      let reopened = 0;
      const t = await guestTls(['http/1.1'], vmCaPem, () => (reopened++, dialer.reopen()));
      expect((await h1(t, { authorization: `Bearer ${OPENAI}` })).status).to.equal(200);
      expect(reopened, 'the first request goes on the connection the guest opened').to.equal(0);
      // The upstream drops it: the next request needs a new connection, and it goes through the proxy.
      for (const u of upstreamSockets.splice(0)) u.destroy();
      await new Promise((r) => setTimeout(r, 100));
      const second = await h1(t, { authorization: `Bearer ${OPENAI}` });
      expect((JSON.parse(second.body) as Echo).headers.authorization).to.equal('Bearer sk-real-1');
      expect(reopened).to.equal(1);
      expect(socks.asked.map((a) => [a.atyp, a.host])).to.deep.equal([[3, 'api.test']]);
      // With the proxy gone, the next connection fails: the request is answered with an error, and
      // nothing reaches the upstream around the proxy.
      socks.stop();
      for (const u of upstreamSockets.splice(0)) u.destroy();
      await new Promise((r) => setTimeout(r, 100));
      const third = await h1(t, { authorization: `Bearer ${OPENAI}` }).catch((e: Error) => ({
        status: 0,
        body: e.message,
      }));
      expect(third.status, third.body).to.be.oneOf([0, 502, 503]);
      expect(reopened).to.equal(2);
      expect(upstreamSockets).to.have.length(0);
      t.destroy();
    } finally {
      socks.stop();
    }
  });

  it('carries the secret in a WebSocket-style upgrade, then splices the connection', async () => {
    const t = await guestTls(['http/1.1']);
    t.write(
      `GET /ws HTTP/1.1\r\nHost: api.test\r\nUpgrade: echo\r\nConnection: Upgrade\r\nAuthorization: Bearer ${OPENAI}\r\n\r\n`,
    );
    let got = '';
    await new Promise<void>((r) => {
      t.on('data', (d: Buffer) => {
        got += d.toString();
        if (got.includes('\r\n\r\n')) r();
      });
    });
    expect(got)
      .to.match(/^HTTP\/1.1 101/)
      .and.include('X-Auth: Bearer sk-real-1');
    got = '';
    t.write('ping');
    await new Promise((r) => setTimeout(r, 200));
    expect(got).to.equal('ping');
    t.destroy();
  });

  it('refuses an upstream whose certificate the trust store does not lead to', async () => {
    const other = await ensureEgressCa(join(dir, 'unrelated-ca'), 'x');
    secrets = new EgressSecrets({
      vm: 'v',
      bindings,
      ca: new EgressCa(join(dir, 'vm-ca'), 'v'),
      values: { value: async () => Buffer.from('nope') },
      trust: [other],
      audit: (e) => audit.push(e),
    });
    let failed: Error | undefined;
    await guestTls(['http/1.1']).catch((e: Error) => (failed = e));
    expect(failed, 'the guest never gets a connection').to.be.instanceOf(Error);
    expect(audit.find((e) => e.rule === 'upstream-tls')).to.include({ event: 'deny', name: 'api.test' });
  });

  it('a guest that does not trust the VM CA gets no connection (its CA is the only way in)', async () => {
    const other = await ensureEgressCa(join(dir, 'unrelated-ca2'), 'y');
    let failed: Error | undefined;
    await guestTls(['http/1.1'], other).catch((e: Error) => (failed = e));
    expect(failed?.message).to.match(/certificate|self.signed|unable/i);
  });

  it('finds a placeholder across chunk borders, and only a known one', () => {
    const s = new LeakScanner(() => new Map([[OPENAI, 'openai']]));
    const text = Buffer.from(`POST / HTTP/1.1\r\nX: ${OPENAI}\r\n\r\n`);
    expect(s.scan(text.subarray(0, 25))).to.equal(undefined);
    expect(s.scan(text.subarray(25, 40))).to.equal(undefined);
    expect(s.scan(text.subarray(40))).to.equal('openai');
    const s2 = new LeakScanner(() => new Map([[OPENAI, 'openai']]));
    expect(s2.scan(Buffer.from(`x ${placeholderOf(randomBytes(20))} y`))).to.equal(undefined);
  });
});
