import { expect } from 'chai';
import { Sandbox, Secret } from 'e2b';
import { hostIp } from '../helpers/host-ip.js';
import { chmodSync, closeSync, mkdtempSync, openSync, readFileSync, readSync, rmSync } from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import { type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { EgressEvent } from '../../src/domain/egress.js';
import { EgressCa } from '../../src/adapters/netd/egress-ca.js';
import type { QmpClient } from '../../src/adapters/hypervisor/qemu/qmp-client.js';
import { Hypervisor } from '../../src/ports/hypervisor.js';
import { egressLogged, guestSh, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { e2bOptions } from '../helpers/e2b.js';
import { TestDns } from '../helpers/dns-server.js';
import { startSeededDaemon } from './snapshot-seeds.js';
import { poll } from '../helpers/wait.js';

const PROBE = readFileSync(fileURLToPath(new URL('../../../test/e2e/fixtures/secret-probe.cjs', import.meta.url)));
const VALUE = 'sk-e2e-7f3a9c1d5b2e8f40';
const ROTATED = 'sk-e2e-rotated-0c4d2a9e';

/** Does the file hold `needle`? Read in pieces (a guest's memory is hundreds of MB). */
function fileHolds(path: string, needle: string): boolean {
  const fd = openSync(path, 'r');
  const buf = Buffer.alloc(8 << 20);
  const n = Buffer.from(needle);
  let carry = Buffer.alloc(0);
  try {
    for (;;) {
      const got = readSync(fd, buf, 0, buf.length, null);
      if (!got) return false;
      const chunk = Buffer.concat([carry, buf.subarray(0, got)]);
      if (chunk.includes(n)) return true;
      carry = Buffer.from(chunk.subarray(Math.max(0, chunk.length - n.length)));
    }
  } finally {
    closeSync(fd);
  }
}

/** Egress secrets on real QEMU guests (docs/egress-secrets.md): the value leaves the host only to its host. */
describe('egress secrets on real QEMU guests', function () {
  this.timeout(300_000);
  const dir = tempDir();
  const HOST = hostIp();
  let d: TestDaemon;
  let dns: TestDns;
  /** An HTTPS upstream on the host's loopback (HTTP/2 and 1.1, a CA of its own), reached as host.svc.internal. */
  let tlsPort = 0;
  /** A plain one on the loopback (also host.svc.internal), and one on the host's address, reached as other.test. */
  let plainPort = 0;
  let otherPort = 0;
  const seen: { port: number; authorization?: string; version: string }[] = [];
  const otherRaw: string[] = [];
  let tlsServer: http2.Http2SecureServer;
  let plain: http.Server;
  let other: http.Server;
  let placeholder = '';

  /**
   * What an upstream received, as a word: the upstreams answer that, never the header itself (an
   * echo of the value would put it into the guest, which is what the memory test looks for).
   */
  const said = (authorization: string | undefined) =>
    authorization === `Bearer ${VALUE}`
      ? 'value'
      : authorization === `Bearer ${ROTATED}`
        ? 'rotated'
        : authorization === `Bearer ${placeholder}`
          ? 'placeholder'
          : `other: ${authorization?.slice(0, 40)}`;
  const echo =
    (port: number) =>
    (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) => {
      seen.push({ port, authorization: req.headers.authorization, version: req.httpVersion });
      req.resume();
      req.on('end', () => res.end(JSON.stringify({ got: said(req.headers.authorization), version: req.httpVersion })));
    };
  const sockets: Socket[] = [];
  const listen = async (s: http.Server | http2.Http2SecureServer, host: string) => {
    s.on('connection', (sock: Socket) => sockets.push(sock));
    await new Promise<void>((r) => s.listen(0, host, () => r()));
    return (s.address() as AddressInfo).port;
  };
  const probe = async (vm: string, mode: string, url: string) => {
    const r = await guestSh(d, vm, `node /tmp/secret-probe.cjs ${mode} ${url}`);
    expect(r.exit_code, r.stderr).to.equal(0);
    return JSON.parse(r.stdout) as { status?: number; body?: string; error?: string; head?: string; echoed?: string };
  };
  const logged = (vm: string, want: (e: EgressEvent) => boolean, what: string) => egressLogged(d, vm, want, what);
  const setValue = async (value: string) =>
    expect((await d.call('POST', '/secrets', { name: 'openai', value })).status).to.be.oneOf([200, 201]);

  before(async () => {
    const upCa = new EgressCa(join(dir, 'upstream-ca'), 'upstream');
    const ctx = await upCa.contextFor('host.svc.internal');
    tlsServer = http2.createSecureServer({ allowHTTP1: true, SNICallback: (_n, cb) => cb(null, ctx) }, echo(1));
    tlsServer.on('upgrade', (req: http.IncomingMessage, sock: Socket) => {
      seen.push({ port: 1, authorization: req.headers.authorization, version: 'upgrade' });
      sock.write(
        `HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\nX-Got: ${said(req.headers.authorization)}\r\n\r\n`,
      );
      sock.pipe(sock);
    });
    tlsPort = await listen(tlsServer, '127.0.0.1');
    plain = http.createServer(echo(2));
    plainPort = await listen(plain, '127.0.0.1');
    other = http.createServer(echo(3));
    other.on('connection', (s: Socket) => s.on('data', (b: Buffer) => otherRaw.push(b.toString('latin1'))));
    otherPort = await listen(other, '0.0.0.0');
    dns = await new TestDns({ 'other.test': [HOST] }).start();
    d = await startSeededDaemon(
      { kind: 'minimal', memory_mb: 384 },
      {
        sandbox_metrics_enabled: false,
        ready_timeout: '180s',
        guest_dns: [`127.0.0.1:${dns.port}`],
        egress_upstream_ca: join(dir, 'upstream-ca.crt'),
      },
    );
    await setValue(VALUE);
    const r = await d.call('POST', '/vms', {
      name: 'es',
      persistent: true,
      egress: {
        default: 'deny',
        allow: [`host:${tlsPort}`, `host:${plainPort}`, `${HOST}:${otherPort}`, 'other.test'],
      },
      egress_secrets: [{ secret: 'openai', hosts: ['host.svc.internal'], env: 'OPENAI_API_KEY' }],
    });
    expect(r.status, r.text).to.equal(201);
    placeholder = r.json.egress_secrets[0].placeholder as string;
    expect(placeholder).to.match(/^svc-egress-[0-9a-f]{40}$/);
    const cp = await d.call('PUT', '/vms/es/cp?path=/tmp/secret-probe.cjs', PROBE, {
      'content-type': 'application/octet-stream',
    });
    expect(cp.status).to.equal(204);
  });
  after(async () => {
    for (const n of ['es', 'esc']) await d?.call('DELETE', `/vms/${n}`).catch(() => undefined);
    await d?.stop();
    dns?.stop();
    for (const s of [tlsServer, plain, other]) s?.close();
    // svc-netd's kept-alive connections to the upstreams end with it; these do not wait for that.
    for (const s of sockets) s.destroy();
  });

  it('the guest holds a placeholder; HTTPS (fetch, HTTP/2, an upgrade) and plain HTTP to its host carry the value', async () => {
    const env = await guestSh(d, 'es', 'echo "$OPENAI_API_KEY"; echo "$SSL_CERT_FILE"');
    expect(env.stdout.split('\n').slice(0, 2)).to.deep.equal([placeholder, '/etc/ssl/certs/ca-certificates.crt']);
    const fetched = await probe('es', 'fetch', `https://host.svc.internal:${tlsPort}/v1/chat`);
    expect(fetched.status, JSON.stringify(fetched)).to.equal(200);
    expect(JSON.parse(fetched.body!)).to.deep.equal({ got: 'value', version: '1.1' });
    const h2 = await probe('es', 'h2', `https://host.svc.internal:${tlsPort}/v2`);
    expect(JSON.parse(h2.body!), JSON.stringify(h2)).to.deep.equal({ got: 'value', version: '2.0' });
    const ws = await probe('es', 'ws', `https://host.svc.internal:${tlsPort}/ws`);
    expect(ws.head, JSON.stringify(ws))
      .to.match(/^HTTP\/1.1 101/)
      .and.include('X-Got: value');
    expect(ws.echoed).to.equal('ping\n');
    const clear = await probe('es', 'http', `http://host.svc.internal:${plainPort}/plain`);
    expect(JSON.parse(clear.body!).got, JSON.stringify(clear)).to.equal('value');
    expect(seen.map((x) => x.authorization)).to.deep.equal(Array(4).fill(`Bearer ${VALUE}`));
    const entries = await logged('es', (e) => e.event === 'secret', 'a secret put in');
    expect(entries.filter((e) => e.event === 'secret')[0]).to.include({
      secret: 'openai',
      name: 'host.svc.internal',
      decision: 'allow',
    });
    expect(JSON.stringify(entries)).not.to.include(VALUE);
    // Nor is it in what the daemon answers and keeps: the VM, its events and activity, svc-netd's log and state.
    const kept = await Promise.all(
      ['/vms/es', '/activity', '/metrics', '/vms/es/egress/secrets'].map(async (p) => (await d.call('GET', p)).text),
    );
    for (const f of ['netd.log', 'netd.json']) kept.push(readFileSync(join(d.config.data_dir, f), 'utf8'));
    expect(kept.join('\n')).to.include(placeholder).and.not.include(VALUE);
  });

  it('sent to a host it is not for, the placeholder goes nowhere: the connection is reset and logged', async () => {
    otherRaw.length = 0;
    const r = await probe('es', 'http', `http://other.test:${otherPort}/steal`);
    expect(r.error, JSON.stringify(r)).to.be.oneOf(['ECONNRESET', 'EPIPE']);
    expect(otherRaw.join(''), 'the other host never saw the placeholder').not.to.include(placeholder);
    expect(seen.filter((s) => s.port === 3)).to.have.length(0);
    const entries = await logged('es', (e) => e.event === 'deny' && e.secret === 'openai', 'the leak refused');
    expect(entries.find((e) => e.event === 'deny' && e.secret === 'openai')).to.include({
      rule: 'egress-secret',
      name: 'other.test',
    });
  });

  it('the value is nowhere in the guest: not its memory, not its files, not any process environment', async () => {
    // Memory first: the checks below put the value (in two halves joined) into a guest process.
    // QEMU may run as a user of its own: the dump goes to a directory that user can write.
    const dumpDir = mkdtempSync(join(tmpdir(), 'svc-dump-'));
    chmodSync(dumpDir, 0o777);
    const dump = join(dumpDir, 'memory.bin');
    // The daemon holds the VM's one QMP connection: the dump goes through it.
    const hv = d.daemon.container.get(Hypervisor) as unknown as {
      live: { running(name: string): { qmp: QmpClient } };
    };
    await hv.live.running('es').qmp.execute('pmemsave', { val: 0, size: 384 * 2 ** 20, filename: dump });
    try {
      expect(fileHolds(dump, placeholder), 'the dump is of this guest (its placeholder is in it)').to.equal(true);
      expect(fileHolds(dump, VALUE), "the value in the guest's memory").to.equal(false);
    } finally {
      rmSync(dumpDir, { recursive: true, force: true });
    }
    const half = VALUE.length >> 1;
    const dirs = '/bin /etc /home /lib /opt /root /run /srv /tmp /usr /var';
    const r = await guestSh(
      d,
      'es',
      [
        `A='${VALUE.slice(0, half)}'; B='${VALUE.slice(half)}'`,
        `grep -rlsF "$A$B" ${dirs} | head -5; echo --`,
        `grep -rlsF '${placeholder}' ${dirs} | head -3; echo --`,
        `for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; echo; done 2>/dev/null > /tmp/envs`,
        `grep -cF "$A$B" /tmp/envs; grep -cF '${placeholder}' /tmp/envs; rm -f /tmp/envs`,
      ].join('\n'),
    );
    const [withValue, withPlaceholder, counts] = r.stdout.split('--\n');
    expect(withValue.trim(), 'files holding the value').to.equal('');
    expect(withPlaceholder.trim(), 'the search works: the agent keeps the placeholder on disk').to.include(
      'egress.json',
    );
    const [valueEnvs, placeholderEnvs] = counts.trim().split('\n').map(Number);
    expect(valueEnvs, 'environments holding the value').to.equal(0);
    expect(placeholderEnvs, 'environments holding the placeholder (what the agent started)').to.be.greaterThan(0);
  });

  it('a rotated value goes out with the next request, and survives a suspend and restore and a clone (its own placeholder)', async () => {
    await setValue(ROTATED);
    const r1 = await probe('es', 'fetch', `https://host.svc.internal:${tlsPort}/rotated`);
    expect(JSON.parse(r1.body!).got, JSON.stringify(r1)).to.equal('rotated');
    expect((await d.call('POST', '/vms/es/suspend')).status).to.equal(200);
    const c = await d.call('POST', '/vms', { name: 'esc', from: 'es' });
    expect(c.status, c.text).to.equal(201);
    const clonePlaceholder = c.json.egress_secrets[0].placeholder as string;
    expect(clonePlaceholder).to.not.equal(placeholder);
    expect((await d.call('POST', '/vms/es/restore')).status).to.equal(200);
    const r2 = await probe('es', 'fetch', `https://host.svc.internal:${tlsPort}/restored`);
    expect(JSON.parse(r2.body!).got, JSON.stringify(r2)).to.equal('rotated');
    expect((await guestSh(d, 'esc', 'echo "$OPENAI_API_KEY"')).stdout.trim()).to.equal(clonePlaceholder);
    const r3 = await probe('esc', 'fetch', `https://host.svc.internal:${tlsPort}/clone`);
    expect(JSON.parse(r3.body!).got, JSON.stringify(r3)).to.equal('rotated');
    // A process that came along in the copy holds the template's placeholder: still put in place.
    const old = await guestSh(
      d,
      'esc',
      `OPENAI_API_KEY=${placeholder} node /tmp/secret-probe.cjs fetch https://host.svc.internal:${tlsPort}/inherited`,
    );
    expect(JSON.parse(JSON.parse(old.stdout).body).got, old.stdout).to.equal('rotated');
    // A binding taken away: the guest's variable goes, and nothing is put in any more.
    const off = await d.call('PUT', '/vms/esc/egress/secrets', []);
    expect(off.status, off.text).to.equal(200);
    expect((await guestSh(d, 'esc', 'echo "[$OPENAI_API_KEY]"')).stdout.trim()).to.equal('[]');
  });

  it("E2B's network.rules through the official SDK: the header is set on the sandbox's requests, and the guest never holds it", async () => {
    await d.call('DELETE', '/vms/esc');
    await setValue('unused-by-rules');
    const sbx = await Sandbox.create({
      ...e2bOptions(d),
      network: {
        allowOut: [`host:${tlsPort}`],
        denyOut: ['0.0.0.0/0'],
        rules: { 'host.svc.internal': [{ transform: { headers: { Authorization: `Bearer ${VALUE}` } } }] },
      },
    });
    try {
      await sbx.files.write('/tmp/secret-probe.cjs', PROBE.toString());
      // The probe sends `Bearer undefined` (no variable is set): the rule's header replaces it.
      const r = await sbx.commands.run(`node /tmp/secret-probe.cjs fetch https://host.svc.internal:${tlsPort}/rule`);
      const out = JSON.parse(r.stdout) as { status?: number; body?: string };
      expect(JSON.parse(out.body!), r.stdout).to.deep.equal({ got: 'value', version: '1.1' });
      const env = await sbx.commands.run('env; cat /proc/self/environ | tr "\\0" "\\n"');
      expect(env.stdout).not.to.include(VALUE).and.not.include('svc-egress-');
      expect(JSON.stringify(await sbx.getInfo())).not.to.include(VALUE);
      const blocked = await sbx.commands.run(
        `node /tmp/secret-probe.cjs http http://host.svc.internal:${plainPort}/no`,
      );
      expect(JSON.parse(blocked.stdout).error, 'a rule does not allow its host').to.be.a('string');
    } finally {
      await sbx.kill();
    }
    const ruleValues = async () =>
      ((await d.call('GET', '/secrets')).json as { name: string }[])
        .map((x) => x.name)
        .filter((n) => n.startsWith('e2b.'));
    let names: string[] = [];
    await poll(async () => (names = await ruleValues()).length === 0, { ms: 10_000, every: 100 });
    expect(names, "the rule's value is removed with the sandbox").to.deep.equal([]);
  });

  it("E2B's Secret in a rule (Secret.fill): its value goes out in the header's text, an update is in force at the next request", async () => {
    const o = e2bOptions(d);
    await Secret.create('e2e-key', VALUE, o);
    const sbx = await Sandbox.create({
      ...o,
      network: {
        allowOut: [`host:${tlsPort}`],
        denyOut: ['0.0.0.0/0'],
        rules: {
          'host.svc.internal': [{ transform: { headers: { Authorization: `Bearer ${Secret.fill('e2e-key')}` } } }],
        },
      },
    });
    try {
      await sbx.files.write('/tmp/secret-probe.cjs', PROBE.toString());
      const got = async () => {
        const r = await sbx.commands.run(`node /tmp/secret-probe.cjs fetch https://host.svc.internal:${tlsPort}/team`);
        return (JSON.parse((JSON.parse(r.stdout) as { body: string }).body) as { got: string }).got;
      };
      expect(await got()).to.equal('value');
      await Secret.update('e2e-key', ROTATED, o);
      expect(await got(), 'the new version, with no change to the sandbox').to.equal('rotated');
      const env = await sbx.commands.run('env; cat /proc/self/environ | tr "\\0" "\\n"');
      expect(env.stdout).not.to.include(VALUE).and.not.include(ROTATED);
    } finally {
      await sbx.kill();
    }
    expect(await Secret.destroy('e2e-key', o)).to.equal(true);
  });
});
