import { expect } from 'chai';
import { hostIp } from '../helpers/host-ip.js';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer as httpServer, type Server as HttpServer } from 'node:http';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { EgressEvent } from '../../src/domain/egress.js';
import { egressLogged, guestSh, type TestDaemon } from '../helpers/daemon.js';
import { TestDns } from '../helpers/dns-server.js';
import { followNdjson } from '../helpers/http.js';
import { startSeededDaemon } from './snapshot-seeds.js';
import { poll, waitUntil } from '../helpers/wait.js';

/** Waits for something to listen on a loopback port (a process just started). */
function waitForPort(port: number): Promise<void> {
  const listens = () =>
    new Promise<boolean>((r) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => (s.destroy(), r(true)));
      s.once('error', () => r(false));
    });
  return waitUntil(`something listens on 127.0.0.1:${port}`, listens, { ms: 5000 });
}

const PROBE = readFileSync(fileURLToPath(new URL('../../../test/e2e/fixtures/net-probe.cjs', import.meta.url)));

async function listen<T extends Server | HttpServer>(server: T, host = '127.0.0.1'): Promise<number> {
  await new Promise<void>((r) => server.listen(0, host, () => r()));
  return (server.address() as AddressInfo).port;
}

describe('the network boundary on real QEMU guests', function () {
  this.timeout(300_000);
  let d: TestDaemon;
  let dns: TestDns;
  const HOST = hostIp();
  /** A listener on the host's loopback that no guest may reach, and how often something did. */
  let secretPort = 0;
  let secretHits = 0;
  const secret = createServer((s) => {
    secretHits++;
    s.destroy();
  });
  /** A web server on the host's loopback that a policy opens with host:PORT. */
  let webPort = 0;
  const web = httpServer((_req, res) => res.end('hello from the host\n'));
  /** A web server on every host address (0.0.0.0): the host's own address is closed too. */
  let widePort = 0;
  let wideHits = 0;
  const wide = httpServer((_req, res) => {
    wideHits++;
    res.end('wide\n');
  });
  /** Sends a byte every 100 ms for as long as a connection lasts, and notes when one closes. */
  let tricklePort = 0;
  const closedAt: number[] = [];
  const trickle = createServer((s: Socket) => {
    const t = setInterval(() => s.write('.'), 100);
    s.on('error', () => undefined);
    s.on('close', () => {
      clearInterval(t);
      closedAt.push(Date.now());
    });
  });

  const probe = async (vm: string, ...args: (string | number)[]) => {
    const r = await guestSh(d, vm, `node /tmp/net-probe.cjs ${args.join(' ')}`);
    expect(r.exit_code, r.stderr).to.equal(0);
    return JSON.parse(r.stdout) as { result: unknown; ms: number; body?: string };
  };
  const logged = (vm: string, want: (e: EgressEvent) => boolean, what: string) => egressLogged(d, vm, want, what);
  const put = async (vm: string, policy: unknown) => {
    const r = await d.call('PUT', `/vms/${vm}/egress`, policy);
    expect(r.status, r.text).to.equal(200);
    return r.json;
  };

  before(async () => {
    secretPort = await listen(secret);
    webPort = await listen(web);
    widePort = await listen(wide, '0.0.0.0');
    tricklePort = await listen(trickle);
    dns = await new TestDns({ 'denied.test': [HOST], 'other.test': ['198.51.100.7'] }).start();
    d = await startSeededDaemon(
      { kind: 'minimal', memory_mb: 384 },
      {
        sandbox_metrics_enabled: false,
        ready_timeout: '180s',
        guest_dns: [`127.0.0.1:${dns.port}`],
      },
    );
    const [a, b] = await Promise.all([
      d.call('POST', '/vms', { name: 'a', persistent: true }),
      d.call('POST', '/vms', { name: 'b' }),
    ]);
    expect(a.status, a.text).to.equal(201);
    expect(b.status, b.text).to.equal(201);
    for (const vm of ['a', 'b'])
      expect(
        (
          await d.call('PUT', `/vms/${vm}/cp?path=/tmp/net-probe.cjs`, PROBE, {
            'content-type': 'application/octet-stream',
          })
        ).status,
      ).to.equal(204);
  });
  after(async () => {
    for (const n of ['a', 'b', 'c']) await d?.call('DELETE', `/vms/${n}`).catch(() => undefined);
    await d?.stop();
    dns?.stop();
    for (const s of [secret, web, wide, trickle]) s.close();
  });

  it("by default a guest reaches none of the host: not the API, not another VM's agent or SSH, not a loopback listener, the host's address or the metadata address", async () => {
    const b = (await d.call('GET', '/vms/b')).json;
    const targets: [string, number, string][] = [
      ['10.0.2.2', d.daemon.tcpPort!, 'host-closed'],
      ['10.0.2.2', b.agent_port, 'host-closed'],
      ['10.0.2.2', b.ssh_port, 'host-closed'],
      ['10.0.2.2', secretPort, 'host-closed'],
      ['host.svc.internal', secretPort, 'host-closed'],
      [HOST, widePort, 'host-address'],
      ['169.254.169.254', 80, 'link-local'],
      ['127.0.0.1', secretPort, ''],
    ];
    for (const [addr, port] of targets)
      expect((await probe('a', 'tcp', addr, port)).result, `${addr}:${port}`).to.be.oneOf([
        'ECONNREFUSED',
        'ECONNRESET',
      ]);
    expect(secretHits, 'the loopback listener never saw a connection').to.equal(0);
    const denied = (await logged('a', (e) => e.rule === 'link-local', 'the metadata address')).filter(
      (e) => e.event === 'deny' && e.proto === 'tcp',
    );
    for (const [addr, port, rule] of targets.filter(([a]) => a !== '127.0.0.1')) {
      expect(
        denied.some(
          (e) =>
            e.port === port &&
            e.rule === rule &&
            (e.addr === addr || (e.addr === 'host' && /^(10\.0\.2\.2|host\.svc\.internal)$/.test(addr))),
        ),
        `${addr}:${port} logged`,
      ).to.equal(true);
    }
    // The internet (what the default allows) still works: DNS through the VM's resolver answers.
    expect((await probe('a', 'dns', 'other.test')).result).to.deep.equal(['198.51.100.7']);
  });

  it('carries 64 KB frames: the NIC svc-netd ends says MTU 65520, and 8 MiB each way arrive whole', async () => {
    const mtu = await guestSh(
      d,
      'a',
      'for i in /sys/class/net/*; do [ "$(cat $i/address)" = 52:54:00:12:34:56 ] && cat $i/mtu; done',
    );
    expect(mtu.stdout.trim(), mtu.stderr).to.equal('65520');
    const text = randomBytes(4 << 20).toString('hex'); // 8 MiB that read back as text exactly
    const up = await d.call('PUT', '/vms/a/cp?path=/tmp/big.bin', Buffer.from(text), {
      'content-type': 'application/octet-stream',
    });
    expect(up.status, up.text).to.equal(204);
    const sum = await guestSh(d, 'a', 'sha256sum /tmp/big.bin');
    expect(sum.stdout.split(' ')[0]).to.equal(createHash('sha256').update(text).digest('hex'));
    const down = await d.call('GET', '/vms/a/cp?path=/tmp/big.bin');
    expect(down.status).to.equal(200);
    expect(down.text.length).to.equal(text.length);
    expect(down.text === text, 'the same bytes back').to.equal(true);
    await guestSh(d, 'a', 'rm -f /tmp/big.bin');
  });

  it('in deny mode reaches exactly the host port its policy names; names, other DNS servers and UDP are refused, and the log says so', async () => {
    await put('a', { default: 'deny', allow: [`host:${webPort}`] });
    const ok = await probe('a', 'http', `http://host.svc.internal:${webPort}/`);
    expect(ok).to.include({ result: 200, body: 'hello from the host\n' });
    expect((await probe('a', 'dns', 'other.test')).result, 'a name no rule allows does not resolve').to.equal(
      'ENOTFOUND',
    );
    expect((await probe('a', 'tcp', '198.51.100.7', 80)).result).to.be.oneOf(['ECONNREFUSED', 'ECONNRESET']);
    expect((await probe('a', 'tcp', '10.0.2.2', secretPort)).result).to.be.oneOf(['ECONNREFUSED', 'ECONNRESET']);
    await probe('a', 'udp', '8.8.8.8', 53);
    await probe('a', 'udp', '1.1.1.1', 9999);
    const entries = await logged(
      'a',
      (e) => e.proto === 'udp' && e.addr === '1.1.1.1' && e.decision === 'deny' && e.rule === 'default',
      'udp to 1.1.1.1',
    );
    expect(entries.some((e) => e.event === 'open' && e.rule === `host:${webPort}`)).to.equal(true);
    expect(
      entries.some(
        (e) => e.event === 'close' && e.rule === `host:${webPort}` && (e.bytes_in ?? 0) > 0 && (e.bytes_out ?? 0) > 0,
      ),
      'bytes each way',
    ).to.equal(true);
    expect(entries.some((e) => e.event === 'dns' && e.name === 'other.test' && e.decision === 'deny')).to.equal(true);
    expect(entries.some((e) => e.proto === 'udp' && e.addr === '8.8.8.8' && e.rule === 'dns-elsewhere')).to.equal(true);
    expect(dns.asked.get('other.test') ?? 0, 'the refused query never reached the resolver').to.equal(1);
    const metrics = (await d.call('GET', '/metrics')).text;
    expect(metrics).to.match(/svc_egress_connections_total\{vm="a",decision="deny"\} \d+/);
    expect(
      (await d.call('GET', '/activity?limit=200')).json.events.some(
        (e: { action: string; target: string }) => e.action === 'egress-deny' && e.target === 'a',
      ),
    ).to.equal(true);
  });

  it('a live PUT closes what it forbids within a second, and a followed log shows it', async () => {
    await put('a', { default: 'deny', allow: [`host:${webPort}`, `host:${tricklePort}`] });
    const follow = followNdjson(d.unix, '/vms/a/egress/log?follow=1&limit=0');
    await guestSh(
      d,
      'a',
      `(node /tmp/net-probe.cjs hold host.svc.internal ${tricklePort} /tmp/held >/dev/null 2>&1 &) ; for i in $(seq 50); do [ -f /tmp/held.open ] && break; sleep 0.1; done`,
    );
    const opened = closedAt.length;
    const t0 = Date.now();
    await put('a', { default: 'deny', allow: [`host:${webPort}`] });
    await poll(() => closedAt.length !== opened, { ms: 2000, every: 20 });
    expect(closedAt.length, 'the host side was closed').to.equal(opened + 1);
    expect(closedAt.at(-1)! - t0, 'within a second of the PUT').to.be.lessThan(1000);
    let held = '';
    for (let i = 0; i < 30 && !held; i++) held = (await guestSh(d, 'a', 'cat /tmp/held 2>/dev/null')).stdout;
    expect(JSON.parse(held).how, 'the guest was reset').to.be.oneOf(['ECONNRESET', 'closed']);
    expect((await probe('a', 'tcp', 'host.svc.internal', tricklePort)).result).to.be.oneOf([
      'ECONNREFUSED',
      'ECONNRESET',
    ]);
    try {
      await follow.until((e) => e.event === 'close' && e.decision === 'deny' && e.port === tricklePort, 5000);
      expect(
        follow.lines.some((e) => e.event === 'open' && e.port === tricklePort),
        'the open, followed as it happened',
      ).to.equal(true);
    } finally {
      follow.close();
    }
    const closes = (await logged('a', (e) => e.event === 'close' && e.port === tricklePort, 'the close')).filter(
      (e) => e.event === 'close' && e.port === tricklePort,
    );
    expect(closes.at(-1), 'the log names the policy that ended it').to.include({
      decision: 'deny',
      rule: 'host-closed',
    });
  });

  it('a denied name does not resolve and its address does not connect, though a rule opens the address', async () => {
    await put('a', { default: 'allow', allow: [`${HOST}:${widePort}`] });
    expect(await probe('a', 'http', `http://${HOST}:${widePort}/`)).to.include({ result: 200, body: 'wide\n' });
    await put('a', { default: 'allow', allow: [`${HOST}:${widePort}`], deny: ['denied.test'] });
    await new Promise((r) => setTimeout(r, 500)); // the network resolves deny rules' names itself
    expect((await probe('a', 'dns', 'denied.test')).result).to.equal('ENOTFOUND');
    expect((await probe('a', 'tcp', HOST, widePort)).result).to.be.oneOf(['ECONNREFUSED', 'ECONNRESET']);
    await logged(
      'a',
      (e) => e.event === 'deny' && e.addr === HOST && e.rule === 'denied.test',
      "the denied name's address",
    );
  });

  it('a restored VM and a clone keep the policy', async () => {
    const policy = { default: 'deny', allow: [`host:${webPort}`], deny: [] };
    await put('a', policy);
    expect((await d.call('POST', '/vms/a/suspend')).status).to.equal(200);
    const c = await d.call('POST', '/vms', { name: 'c', from: 'a' });
    expect(c.status, c.text).to.equal(201);
    expect(c.json.egress).to.deep.equal(policy);
    expect((await d.call('POST', '/vms/a/restore')).status).to.equal(200);
    for (const vm of ['a', 'c']) {
      expect((await d.call('GET', `/vms/${vm}/egress`)).json).to.deep.equal(policy);
      expect(await probe(vm, 'http', `http://host.svc.internal:${webPort}/`), vm).to.include({ result: 200 });
      expect((await probe(vm, 'tcp', '10.0.2.2', secretPort)).result, vm).to.be.oneOf(['ECONNREFUSED', 'ECONNRESET']);
      expect((await probe(vm, 'dns', 'other.test')).result, vm).to.equal('ENOTFOUND');
    }
    expect(secretHits).to.equal(0);
  });

  it('tunnels what a policy allows through a SOCKS5 proxy (microsocks) with the password from a host secret; fails closed when the proxy refuses or is gone', async () => {
    const free = createServer();
    const port = await listen(free);
    await new Promise((r) => free.close(r));
    const user = 'svc';
    const ms = spawn('microsocks', ['-i', '127.0.0.1', '-p', String(port), '-u', user, '-P', 'pw-1'], {
      stdio: 'ignore',
    });
    const hits = () => wideHits;
    try {
      await waitForPort(port);
      expect((await d.call('POST', '/secrets', { name: 'socks-pw', value: 'pw-1' })).status).to.equal(200);
      const policy = {
        default: 'deny',
        allow: [`${HOST}:${widePort}`],
        deny: [],
        proxy: { address: `127.0.0.1:${port}`, username: user, secret: 'socks-pw' },
      };
      expect(await put('a', policy)).to.deep.equal(policy);
      expect(await probe('a', 'http', `http://${HOST}:${widePort}/`)).to.include({ result: 200, body: 'wide\n' });
      const reached = hits();
      expect(reached, 'the web server was reached').to.be.above(0);
      // A password the proxy refuses: the guest's connection fails, and nothing is dialed directly.
      expect((await d.call('POST', '/secrets', { name: 'socks-pw', value: 'wrong' })).status).to.equal(200);
      expect((await probe('a', 'http', `http://${HOST}:${widePort}/`)).result).to.be.oneOf([
        'ECONNREFUSED',
        'ECONNRESET',
      ]);
      ms.kill();
      await new Promise((r) => ms.once('exit', r));
      expect((await d.call('POST', '/secrets', { name: 'socks-pw', value: 'pw-1' })).status).to.equal(200);
      expect((await probe('a', 'http', `http://${HOST}:${widePort}/`)).result).to.be.oneOf([
        'ECONNREFUSED',
        'ECONNRESET',
      ]);
      expect(hits(), 'no connection went around the proxy').to.equal(reached);
      const failed = await logged(
        'a',
        (e) => e.event === 'close' && /SOCKS5 proxy/.test(e.error ?? ''),
        'a failed dial',
      );
      expect(
        failed
          .filter((e) => /SOCKS5 proxy/.test(e.error ?? ''))
          .map((e) => e.error)
          .join(' '),
      ).not.to.include('wrong');
    } finally {
      ms.kill();
      await d.call('DELETE', '/secrets/socks-pw');
    }
  });
});
