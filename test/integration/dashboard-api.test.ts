import { expect } from 'chai';
import { request } from 'node:http';
import { call } from '../helpers/http.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';
import { openShell } from '../helpers/ws-shell.js';

/** Reads an NDJSON stream line by line until `enough` says stop; then drops the connection. */
function readEvents(
  port: number,
  path: string,
  headers: Record<string, string>,
  enough: (lines: Record<string, unknown>[]) => boolean,
): Promise<Record<string, unknown>[]> {
  return new Promise((resolve, reject) => {
    const lines: Record<string, unknown>[] = [];
    const req = request({ host: '127.0.0.1', port, path, headers }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`status ${res.statusCode}`));
      let buf = '';
      res.on('data', (c: Buffer) => {
        buf += c.toString('utf8');
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          lines.push(JSON.parse(buf.slice(0, nl)) as Record<string, unknown>);
          buf = buf.slice(nl + 1);
        }
        if (enough(lines)) {
          req.destroy();
          resolve(lines);
        }
      });
      res.on('end', () => resolve(lines));
    });
    req.on('error', (err) => (lines.length > 0 ? resolve(lines) : reject(err)));
    req.end();
  });
}

describe('dashboard API: log-in sessions, the change feed, the page', function () {
  this.timeout(30_000);
  let d: TestDaemon;
  let port: number;
  before(async () => {
    d = await startTestDaemon({ fake_agent: true, ui_session: '2s' });
    port = d.tcp.port!;
  });
  after(async () => d.stop());
  const tcp = (method: string, path: string, headers: Record<string, string> = {}, body?: unknown) =>
    call({ port }, method, path, body, headers);
  const login = async () => {
    const r = await tcp('POST', '/ui/session', { origin: `http://127.0.0.1:${port}` }, { token: d.config.api_token });
    expect(r.status, r.text).to.equal(200);
    return r.json.session as string;
  };

  it('serves the page without a token, with a strict CSP and no framing', async () => {
    const r = await tcp('GET', '/ui/');
    expect(r.status).to.equal(200);
    expect(r.headers['content-type']).to.match(/text\/html/);
    expect(r.text).to.include('app.js');
    expect(r.headers['content-security-policy'])
      .to.include("script-src 'self'")
      .and.to.include("frame-ancestors 'none'");
    expect(r.headers['x-frame-options']).to.equal('DENY');
    expect((await tcp('GET', '/ui/app.js')).headers['content-type']).to.match(/javascript/);
    const redirect = await tcp('GET', '/ui');
    expect(redirect.status).to.equal(308);
    expect(redirect.headers.location).to.equal('/ui/');
    expect((await tcp('GET', '/ui/secret.txt')).status).to.equal(404);
    expect((await tcp('GET', '/ui/..%2fpackage.json')).status).to.equal(404);
    // the data behind it still needs auth
    expect((await tcp('GET', '/vms')).status).to.equal(401);
  });

  it('trades the token for a session id that expires, carried in a header and never in a cookie; refuses a wrong token', async () => {
    const bad = await tcp('POST', '/ui/session', {}, { token: 'wrong' });
    expect(bad.status).to.equal(401);
    expect(bad.json.session).to.equal(undefined);
    expect((await tcp('GET', '/ui/session')).json).to.deep.equal({ token_required: true, authenticated: false });
    const r = await tcp('POST', '/ui/session', {}, { token: d.config.api_token });
    expect(r.json).to.include({ token_required: true, authenticated: true, expires_in_sec: 2 });
    expect(r.json.session).to.match(/^[A-Za-z0-9_-]{43}$/);
    // Cookies reach every port of the host (a guest's app forwarded to 127.0.0.1:8080 would get it).
    expect(r.headers['set-cookie'], 'no cookie').to.equal(undefined);
    expect(r.headers['cache-control']).to.equal('no-store');
    const id = r.json.session as string;
    const withSession = { 'x-svc-session': id };
    expect((await tcp('GET', '/ui/session', withSession)).json.authenticated).to.equal(true);
    expect((await tcp('GET', '/vms', withSession)).status).to.equal(200);
    expect((await tcp('GET', '/vms', { cookie: `svc_session=${id}` })).status, 'a cookie is no session').to.equal(401);
    expect((await tcp('GET', '/vms', { 'x-svc-session': 'x'.repeat(43) })).status).to.equal(401);
    await new Promise((res) => setTimeout(res, 2100));
    expect((await tcp('GET', '/vms', withSession)).status, 'expired').to.equal(401);
  });

  it('logs out: the session is dead on the server', async () => {
    const id = await login();
    const withSession = { 'x-svc-session': id };
    const out = await tcp('DELETE', '/ui/session', { ...withSession, origin: `http://127.0.0.1:${port}` });
    expect(out.status).to.equal(204);
    expect((await tcp('GET', '/vms', withSession)).status).to.equal(401);
  });

  it('refuses a log-in, a change or a shell from another origin, and a foreign Host, even with a live session', async () => {
    const id = await login();
    const evil = { origin: 'http://evil.example', 'x-svc-session': id };
    expect(
      (await tcp('POST', '/ui/session', { origin: 'http://evil.example' }, { token: d.config.api_token })).status,
      'login CSRF',
    ).to.equal(403);
    expect((await tcp('POST', '/vms', evil, { name: 'csrf' })).status).to.equal(403);
    expect((await d.call('GET', '/vms/csrf')).status).to.equal(404);
    expect((await tcp('GET', '/ui/', { host: 'attacker.example' })).status, 'DNS rebinding').to.equal(403);
    expect((await tcp('GET', '/vms', { host: `rebind.example:${port}`, 'x-svc-session': id })).status).to.equal(403);
    const err = await openShell(`ws://127.0.0.1:${port}/vms/nope/shell`, evil).then(
      () => undefined,
      (e: { status?: number }) => e,
    );
    expect(err?.status).to.equal(403);
  });

  it("lets a session open the shell WebSocket from the daemon's own origin, the session as a subprotocol", async () => {
    expect((await d.call('POST', '/vms', { name: 'sh1' })).status).to.equal(201);
    const id = await login();
    const origin = `http://127.0.0.1:${port}`;
    const sh = await openShell(`ws://127.0.0.1:${port}/vms/sh1/shell`, { origin }, ['svc', `svc-session.${id}`]);
    expect(sh.ws.protocol, "the dashboard's protocol is answered, not the session").to.equal('svc');
    sh.send('echo session-$((20+22))\n');
    await sh.waitFor(/session-42/);
    sh.ws.close();
    const without = await openShell(`ws://127.0.0.1:${port}/vms/sh1/shell`, { origin }, ['svc']).then(
      () => undefined,
      (e: { status?: number }) => e,
    );
    expect(without?.status).to.equal(401);
    expect((await d.call('DELETE', '/vms/sh1')).status).to.equal(200);
  });

  it('streams a snapshot, then every change: created, state changes, removed', async () => {
    const auth = { authorization: `Bearer ${d.config.api_token}` };
    const seen = readEvents(port, '/events', auth, (ls) => ls.some((l) => l.event === 'removed' && l.name === 'ev1'));
    await new Promise((r) => setTimeout(r, 200));
    expect((await d.call('POST', '/vms', { name: 'ev1', persistent: true })).status).to.equal(201);
    expect((await d.call('POST', '/vms/ev1/pause')).status).to.equal(200);
    expect((await d.call('POST', '/vms/ev1/resume')).status).to.equal(200);
    expect((await d.call('DELETE', '/vms/ev1')).status).to.equal(200);
    const lines = await seen;
    expect(lines[0].event).to.equal('snapshot');
    expect(lines[0].vms).to.be.an('array');
    const states = lines
      .filter((l) => l.event === 'vm' && (l.vm as { name: string }).name === 'ev1')
      .map((l) => (l.vm as { status: string }).status);
    expect(states[0]).to.equal('creating');
    expect(states).to.include('running').and.to.include('paused');
    expect(states.indexOf('paused')).to.be.lessThan(states.lastIndexOf('running'));
    expect(lines[lines.length - 1]).to.deep.equal({ event: 'removed', name: 'ev1' });
    // VMs as the API shows them: nothing private
    for (const l of lines.filter((x) => x.event === 'vm'))
      expect(l.vm).to.not.have.any.keys('runtime', 'userdata', 'agent_missing');
  });

  it('needs auth for the change feed', async () => {
    expect((await tcp('GET', '/events')).status).to.equal(401);
  });
});

describe('dashboard without a token', function () {
  this.timeout(30_000);
  let d: TestDaemon;
  before(async () => {
    d = await startTestDaemon({ api_token: '' });
  });
  after(async () => d.stop());

  it('needs no log-in on loopback', async () => {
    const port = d.tcp.port!;
    expect((await call({ port }, 'GET', '/ui/session')).json).to.deep.equal({
      token_required: false,
      authenticated: true,
    });
    const r = await call({ port }, 'POST', '/ui/session', { token: '' }, { origin: `http://127.0.0.1:${port}` });
    expect(r.json.authenticated).to.equal(true);
    expect(r.json.session).to.equal(undefined);
  });
});

describe('wrong tokens over TCP slow down the next guesses, not the Unix socket', function () {
  this.timeout(30_000);
  let d: TestDaemon;
  before(async () => {
    d = await startTestDaemon({ fake_agent: true });
  });
  after(async () => d.stop());

  it('paces credentials at 4 a second after 10 wrong ones (bearer or log-in alike), while the socket answers at once', async () => {
    const port = d.tcp.port!;
    const origin = { origin: `http://127.0.0.1:${port}` };
    for (let i = 0; i < 6; i++)
      expect((await call({ port }, 'GET', '/vms', undefined, { authorization: 'Bearer guess' })).status).to.equal(401);
    for (let i = 0; i < 5; i++)
      expect((await call({ port }, 'POST', '/ui/session', { token: 'guess' }, origin)).status).to.equal(401);
    const t0 = Date.now();
    const paced = await Promise.all(
      Array.from({ length: 5 }, () => call({ port }, 'GET', '/vms', undefined, { authorization: 'Bearer guess' })),
    );
    expect(paced.map((r) => r.status)).to.deep.equal([401, 401, 401, 401, 401]);
    expect(Date.now() - t0, 'five guesses take their turns').to.be.at.least(900);
    const t1 = Date.now();
    expect((await d.call('GET', '/vms')).status, 'the Unix socket').to.equal(200);
    expect(Date.now() - t1).to.be.below(500);
  });
});
