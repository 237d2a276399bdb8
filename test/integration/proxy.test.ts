import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { connect, createServer as createTcpServer, type AddressInfo, type Server } from 'node:net';
import { join } from 'node:path';
import { InMemoryHypervisor } from '../../src/adapters/hypervisor/fake/in-memory-hypervisor.js';
import { startLocalGuest } from '../../src/adapters/hypervisor/fake/local-guest.js';
import { SilentLogger } from '../fakes/fakes.js';
import { qs } from '../helpers/http.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

import { makeTar, readTar } from '../helpers/tar.js';
import { openShell } from '../helpers/ws-shell.js';

/** A TCP echo server standing in for a service in the guest. */
async function echoServer(): Promise<{ port: number; server: Server }> {
  const server = createTcpServer((s) => s.pipe(s));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { port: (server.address() as AddressInfo).port, server };
}

function echoThrough(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => s.end(text));
    let out = '';
    s.on('data', (d) => (out += d));
    s.on('end', () => resolve(out));
    s.on('error', reject);
  });
}

describe('daemon <-> guest (fake hypervisor with real local agents and sshd)', function () {
  this.timeout(60000);
  let d: TestDaemon;
  const logs = new SilentLogger();

  before(async () => {
    d = await startTestDaemon(
      { fake_agent: true, sandbox_metrics_interval: '200ms', sandbox_metrics_points: 4 },
      { logger: logs },
    );
    const r = await d.call('POST', '/vms', { name: 'g', persistent: true });
    expect(r.status, r.text).to.equal(201);
  });
  after(async () => {
    await d.stop();
  });

  describe('agent proxy', () => {
    it('proxies agent health and stats', async () => {
      const h = await d.call('GET', '/vms/g/agent/health');
      expect(h.status).to.equal(200);
      expect(h.json).to.include({ userdata_ran: true });
      expect(h.json.agent_version).to.match(/^\d/);
      const s = await d.call('GET', '/vms/g/stats');
      expect(s.json.mem_total_bytes).to.be.above(0);
    });

    it('runs buffered exec with stdin and a non-zero exit as 200', async () => {
      const r = await d.call(
        'POST',
        `/vms/g/exec?${qs({ cmd: 'sh', args: ['-c', 'cat; echo oops >&2; exit 5'] })}`,
        'piped in',
        { 'content-type': 'application/octet-stream' },
      );
      expect(r.status).to.equal(200);
      expect(r.json).to.deep.equal({ stdout: 'piped in', stderr: 'oops\n', exit_code: 5 });
    });

    it('streams exec frames while the command runs', async () => {
      const t0 = Date.now();
      const arrivals: { type: string; at: number }[] = [];
      await new Promise<void>((resolve, reject) => {
        const req = request(
          {
            socketPath: d.config.socket,
            method: 'POST',
            path: `/vms/g/exec?${qs({ cmd: 'sh', args: ['-c', 'echo a; sleep 1.5; echo b'], buffered: 'false' })}`,
            headers: { authorization: 'Bearer test-token' },
          },
          (res) => {
            expect(res.statusCode).to.equal(200);
            let buf = '';
            res.on('data', (c) => {
              buf += c;
              for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
                arrivals.push({ type: (JSON.parse(buf.slice(0, i)) as { type: string }).type, at: Date.now() - t0 });
                buf = buf.slice(i + 1);
              }
            });
            res.on('end', resolve);
          },
        );
        req.on('error', reject);
        req.end();
      });
      expect(arrivals.map((a) => a.type)).to.deep.equal(['started', 'stdout', 'stdout', 'exit']);
      expect(arrivals[3].at - arrivals[1].at).to.be.above(1000);
    });

    it('round-trips files byte-exact and trees as tar through the daemon', async () => {
      const data = randomBytes(5 * 1024 * 1024 + 3);
      const root = join(d.config.data_dir, 'vms', 'g', 'guest');
      const path = join(root, 'home', 'f.bin');
      expect(
        (
          await d.call('PUT', `/vms/g/cp?${qs({ path, permissions: '0600' })}`, data, {
            'content-type': 'application/octet-stream',
          })
        ).status,
      ).to.equal(204);
      expect(statSync(path).mode & 0o777).to.equal(0o600);
      const back = await rawGet(d, `/vms/g/cp?${qs({ path })}`);
      expect(back.type).to.equal('application/octet-stream');
      expect(back.body.equals(data)).to.equal(true);
      // A page written by the guest comes back as an attachment the browser may not sniff or render.
      const page = join(root, 'home', 'pagé".html');
      writeFileSync(page, '<script>alert(1)</script>');
      const html = await d.call('GET', `/vms/g/cp?${qs({ path: page })}`);
      expect(html.headers['content-type']).to.match(/^application\/octet-stream/);
      expect(html.headers['x-content-type-options']).to.equal('nosniff');
      expect(html.headers['content-disposition']).to.equal(
        `attachment; filename="pag__.html"; filename*=UTF-8''${encodeURIComponent('pagé".html')}`,
      );
      expect(
        (await d.call('GET', `/vms/g/cp?${qs({ path: join(root, 'home'), mode: 'tar' })}`)).headers[
          'content-disposition'
        ],
      ).to.match(/^attachment; filename="home\.tar"/);
      const tarIn = await makeTar([
        { name: 'dir', type: 'directory', mode: 0o750 },
        { name: 'dir/x.txt', data: 'x', mode: 0o640 },
        { name: 'ln', type: 'symlink', linkname: 'dir/x.txt' },
      ]);
      const dest = join(root, 'tree');
      expect(
        (
          await d.call('PUT', `/vms/g/cp?${qs({ path: dest, mode: 'tar' })}`, tarIn, {
            'content-type': 'application/x-tar',
          })
        ).status,
      ).to.equal(204);
      const listing = await readTar((await rawGet(d, `/vms/g/cp?${qs({ path: dest, mode: 'tar' })}`)).body);
      expect([...listing.keys()].sort()).to.deep.equal(['dir', 'dir/x.txt', 'ln']);
      expect(listing.get('dir/x.txt')!.mode).to.equal(0o640);
      const evil = await makeTar([{ name: '../../escape', data: 'x' }]);
      const refused = await d.call('PUT', `/vms/g/cp?${qs({ path: dest, mode: 'tar' })}`, evil, {
        'content-type': 'application/x-tar',
      });
      expect(refused.status).to.equal(400);
      expect(refused.json.error).to.match(/outside/);
    });

    it('maps fs errors: 404 missing, 400 bad input, 409 exists; 204 on success', async () => {
      const root = join(d.config.data_dir, 'vms', 'g', 'guest');
      expect(
        (await d.call('POST', '/vms/g/fs/mkdir', { path: join(root, 'm', 'n'), recursive: true })).status,
      ).to.equal(204);
      expect((await d.call('POST', '/vms/g/fs/mkdir', { path: join(root, 'm') })).status).to.equal(409);
      expect((await d.call('POST', '/vms/g/fs/symlink', { path: join(root, 'lnk'), target: 'm' })).status).to.equal(
        204,
      );
      const ls = await d.call('GET', `/vms/g/fs/readdir?${qs({ path: root })}`);
      expect(ls.json.find((e: { name: string }) => e.name === 'lnk')).to.include({ type: 'symlink', target: 'm' });
      expect((await d.call('GET', `/vms/g/fs/stat?${qs({ path: join(root, 'nope') })}`)).status).to.equal(404);
      expect((await d.call('GET', '/vms/g/fs/stat?path=relative')).status).to.equal(400);
      expect((await d.call('GET', '/vms/g/fs/readdir')).status).to.equal(400);
      expect((await d.call('DELETE', `/vms/g/fs/remove?${qs({ path: join(root, 'm') })}`)).status).to.equal(409);
      expect(
        (await d.call('DELETE', `/vms/g/fs/remove?${qs({ path: join(root, 'm'), recursive: 'true' })}`)).status,
      ).to.equal(204);
      expect((await d.call('GET', `/vms/nope/fs/stat?${qs({ path: '/' })}`)).status).to.equal(404);
      expect((await d.call('POST', `/vms/g/exec?cmd=`)).status).to.equal(400);
    });

    it('says a full guest disk is one (507 insufficient_storage), for a file and a tar, and leaves nothing', async function () {
      if (process.getuid?.() !== 0) this.skip(); // mounting a tmpfs needs root; CI runs as root
      const full = join(d.config.data_dir, 'vms', 'g', 'guest', 'full');
      mkdirSync(full);
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', full]);
      try {
        const big = randomBytes(256 * 1024);
        const file = await d.call('PUT', `/vms/g/cp?${qs({ path: join(full, 'f.bin') })}`, big, {
          'content-type': 'application/octet-stream',
        });
        expect(file.status, file.text).to.equal(507);
        expect(file.json.code).to.equal('insufficient_storage');
        expect(file.json.error).to.match(/no space left/);
        // 4 MiB and more with a length go socket to socket past the daemon (the splice helper)
        const large = await d.call('PUT', `/vms/g/cp?${qs({ path: join(full, 'g.bin') })}`, randomBytes(5 << 20), {
          'content-type': 'application/octet-stream',
        });
        expect(large.status, large.text).to.equal(507);
        expect(large.json.code).to.equal('insufficient_storage');
        const tar = await d.call(
          'PUT',
          `/vms/g/cp?${qs({ path: join(full, 't'), mode: 'tar' })}`,
          await makeTar([{ name: 'x.bin', data: big }]),
          { 'content-type': 'application/x-tar' },
        );
        expect(tar.status, tar.text).to.equal(507);
        expect(tar.json.code).to.equal('insufficient_storage');
        expect(readdirSync(full).filter((n) => n !== 't')).to.deep.equal([]); // no temp file left
      } finally {
        execFileSync('umount', [full]);
      }
    });

    it('says what else a guest path refuses: 400 for a name too long and a read-only file system', async function () {
      const root = join(d.config.data_dir, 'vms', 'g', 'guest');
      const long = await d.call('GET', `/vms/g/fs/stat?${qs({ path: join(root, 'x'.repeat(300)) })}`);
      expect(long.status, long.text).to.equal(400);
      expect(long.json.error).to.match(/name too long/);
      if (process.getuid?.() !== 0) this.skip(); // mounting needs root; CI runs as root
      const ro = join(root, 'ro');
      mkdirSync(ro);
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'ro,size=64k', 'tmpfs', ro]);
      try {
        const w = await d.call('PUT', `/vms/g/cp?${qs({ path: join(ro, 'f') })}`, Buffer.from('x'), {
          'content-type': 'application/octet-stream',
        });
        expect(w.status, w.text).to.equal(400);
        expect(w.json.error).to.match(/read-only file system/);
      } finally {
        execFileSync('umount', [ro]);
      }
    });

    it('runs a shell through the proxy, with auth checked on the upgrade', async () => {
      const denied = await openShell(`ws://127.0.0.1:${d.tcp.port}/vms/g/shell`).catch((e) => e);
      expect(denied.status).to.equal(401);
      const missing = await openShell(`ws://127.0.0.1:${d.tcp.port}/vms/zz/shell`, {
        authorization: 'Bearer test-token',
      }).catch((e) => e);
      expect(missing.status).to.equal(404);
      const sh = await openShell(`ws://127.0.0.1:${d.tcp.port}/vms/g/shell?cols=90&rows=20&shell=/bin/sh`, {
        authorization: 'Bearer test-token',
      });
      sh.send('stty size\n');
      await sh.waitFor(/20 90/);
      sh.resize(132, 43);
      await new Promise((r) => setTimeout(r, 200));
      sh.send('stty size\n');
      await sh.waitFor(/43 132/);
      sh.send('exit 4\n');
      expect(await sh.exit).to.deep.equal({ exit_code: 4, closeCode: 1000 });
      expect((await d.call('GET', '/vms/g/shell')).status).to.equal(426);
    });

    it('materializes a secret with its mode, never logging the value', async () => {
      const value = 'sup3r-s3cret-v@lue';
      await d.call('POST', '/secrets', { name: 'API_KEY', value, mode: '0640' });
      const r = await d.call('POST', '/vms/g/secrets/API_KEY');
      expect(r.status, r.text).to.equal(200);
      const root = join(d.config.data_dir, 'vms', 'g', 'guest');
      expect(r.json).to.deep.equal({
        name: 'g',
        secret: 'API_KEY',
        path: join(root, 'run', 'svc', 'secrets', 'API_KEY'),
        mode: '0640',
      });
      expect(readFileSync(r.json.path, 'utf8')).to.equal(value);
      expect(statSync(r.json.path).mode & 0o777).to.equal(0o640);
      const custom = join(root, 'etc', 'key');
      const r2 = await d.call('POST', '/vms/g/secrets/API_KEY', { path: custom, mode: '0400' });
      expect(r2.json.mode).to.equal('0400');
      expect(statSync(custom).mode & 0o777).to.equal(0o400);
      expect((await d.call('POST', '/vms/g/secrets/MISSING')).status).to.equal(404);
      expect((await d.call('POST', '/vms/g/secrets/API_KEY', { path: 'rel' })).status).to.equal(400);
      await d.daemon.container
        .get<{ flush(): Promise<void> }>((await import('../../src/ports/stores.js')).ActivityLog)
        .flush();
      expect(readFileSync(join(d.config.data_dir, 'activity.json'), 'utf8')).not.to.contain(value);
      expect(JSON.stringify(logs.lines)).not.to.contain(value);
      expect(readFileSync(join(d.config.data_dir, 'vms', 'g', 'agent.log'), 'utf8')).not.to.contain(value);
    });

    it('deploys the agent over SSH and waits for the new one', async () => {
      const before = (await d.call('GET', '/vms/g/agent/health')).json;
      const r = await d.call('POST', '/vms/g/agent/deploy');
      expect(r.status, r.text).to.equal(200);
      expect(r.json).to.deep.equal({ name: 'g', agent_version: before.agent_version });
      const root = join(d.config.data_dir, 'vms', 'g', 'guest');
      expect(existsSync(join(root, 'opt', 'svc', 'agent', 'svc-agent.cjs'))).to.equal(true);
      expect(existsSync(join(root, 'opt', 'svc', 'agent', 'svc-agent'))).to.equal(false);
      const pid = readFileSync(join(root, 'run', 'svc', 'agent.pid'), 'utf8').trim();
      expect(readFileSync(`/proc/${pid}/cmdline`, 'utf8')).to.contain(
        join(root, 'opt', 'svc', 'agent', 'svc-agent.cjs'),
      );
      const after = (await d.call('GET', '/vms/g/agent/health')).json;
      expect(after.agent_uptime_sec).to.be.below(before.agent_uptime_sec);
    });

    it('answers 503 naming agent/deploy on a VM of an image without an agent, until the agent is deployed', async () => {
      const c = await d.call('POST', '/vms', { name: 'noagent', image: 'ssh-only' });
      expect(c.status, c.text).to.equal(201);
      for (const [m, p] of [
        ['POST', '/vms/noagent/exec?cmd=true'],
        ['GET', '/vms/noagent/agent/health'],
        ['GET', '/vms/noagent/fs/readdir?path=/'],
      ]) {
        const r = await d.call(m, p);
        expect(r.status, `${m} ${p}: ${r.text}`).to.equal(503);
        expect(r.json.error).to.match(
          /image ssh-only, which has no svc agent yet: deploy it with POST \/vms\/noagent\/agent\/deploy/,
        );
      }
      expect((await d.call('GET', '/vms/noagent')).json).not.to.have.property('agent_missing');
      const record = () => JSON.parse(readFileSync(join(d.config.data_dir, 'vms', 'noagent', 'instance.json'), 'utf8'));
      expect(record().agent_missing).to.equal(true);
      const dep = await d.call('POST', '/vms/noagent/agent/deploy');
      expect(dep.status, dep.text).to.equal(200);
      const r = await d.call('POST', '/vms/noagent/exec?cmd=echo&args=deployed');
      expect(r.status, r.text).to.equal(200);
      expect(r.json.stdout).to.equal('deployed\n');
      // Saved, so a restarted daemon remembers it.
      expect(record()).not.to.have.property('agent_missing');
      await d.call('DELETE', '/vms/noagent');
    });
  });

  describe('live forwards', () => {
    it('carries TCP traffic, refuses bad or busy ports, and closes', async () => {
      const echo = await echoServer();
      try {
        const r = await d.call('POST', '/vms/g/forwards', { guest_port: echo.port });
        expect(r.status, r.text).to.equal(201);
        expect(r.json).to.include({ guest_port: echo.port, proto: 'tcp', kind: 'live', pid: process.pid });
        expect(r.json.host_port).to.be.above(1023);
        expect(await echoThrough(r.json.host_port, 'hello through ssh')).to.equal('hello through ssh');
        const inst = (await d.call('GET', '/vms/g')).json;
        expect(inst.forwards.filter((f: { kind: string }) => f.kind === 'live')).to.have.length(1);
        expect((await d.call('POST', '/vms/g/forwards', { guest_port: 80, host_port: 80 })).status).to.equal(400);
        expect((await d.call('POST', '/vms/g/forwards', { host_port: 8080 })).status).to.equal(400);
        const busy = await d.call('POST', '/vms/g/forwards', { guest_port: echo.port, host_port: echo.port });
        expect(busy.status).to.equal(409);
        expect(busy.json.error).to.match(/busy/);
        const del = await d.call('DELETE', `/vms/g/forwards/${r.json.host_port}`);
        expect(del.json).to.deep.equal({
          message: `forward ${r.json.host_port} of vm g closed`,
          name: 'g',
          host_port: r.json.host_port,
        });
        expect(await echoThrough(r.json.host_port, 'x').catch((e) => e.code)).to.equal('ECONNREFUSED');
        expect((await d.call('DELETE', `/vms/g/forwards/${r.json.host_port}`)).status).to.equal(404);
      } finally {
        echo.server.close();
      }
    });

    it('closes forwards on shutdown and re-opens them on start', async () => {
      const echo = await echoServer();
      try {
        const { host_port } = (await d.call('POST', '/vms/g/forwards', { guest_port: echo.port })).json;
        await d.call('POST', '/vms/g/shutdown');
        expect(await echoThrough(host_port, 'x').catch((e) => e.code)).to.equal('ECONNREFUSED');
        expect((await d.call('POST', '/vms/g/forwards', { guest_port: echo.port })).status).to.equal(400);
        expect((await d.call('GET', '/vms/g/agent/health')).status).to.equal(503);
        expect((await d.call('POST', '/vms/g/exec?cmd=true')).status).to.equal(503);
        await d.call('POST', '/vms/g/start');
        expect(await echoThrough(host_port, 'back again')).to.equal('back again');
        await d.call('DELETE', `/vms/g/forwards/${host_port}`);
      } finally {
        echo.server.close();
      }
    });
  });

  describe('stats history', () => {
    it('fills metrics.ring, wraps at capacity, and keeps it when sampling stops', async () => {
      await new Promise((r) => setTimeout(r, 1600));
      // Pausing stops sampling; reading the ring after that keeps the checks below free of a race
      // with the next sample (every 200 ms) on a busy machine.
      await d.call('POST', '/vms/g/pause');
      await new Promise((r) => setTimeout(r, 500));
      const m = (await d.call('GET', '/vms/g/metrics')).json;
      expect(m).to.include({ name: 'g', enabled: true, interval_sec: 0.2, capacity: 4 });
      expect(m.points).to.have.length(4);
      const ts = m.points.map((p: { t_ms: number }) => p.t_ms);
      expect(ts).to.deep.equal([...ts].sort((a: number, b: number) => a - b));
      expect(m.points[0].mem_total_bytes).to.be.above(0);
      expect(statSync(join(d.config.data_dir, 'vms', 'g', 'metrics.ring')).size).to.equal(64 + 4 * 80);
      expect((await d.call('GET', `/vms/g/metrics?limit=2`)).json.points).to.deep.equal(m.points.slice(-2));
      expect((await d.call('GET', `/vms/g/metrics?since=${ts[2]}`)).json.points).to.deep.equal(m.points.slice(3));
      await new Promise((r) => setTimeout(r, 500));
      expect((await d.call('GET', '/vms/g/metrics')).json.points).to.deep.equal(m.points);
      await d.call('POST', '/vms/g/resume');
    });

    it('does not sample a vm created with metrics_enabled: false', async () => {
      await d.call('POST', '/vms', { name: 'quiet', metrics_enabled: false });
      await new Promise((r) => setTimeout(r, 600));
      const m = (await d.call('GET', '/vms/quiet/metrics')).json;
      expect(m).to.include({ enabled: false });
      expect(m.points).to.deep.equal([]);
      await d.call('DELETE', '/vms/quiet');
    });
  });
});

describe('daemon <-> guest: failures and restarts', function () {
  this.timeout(60000);

  it('answers 503 when the agent does not answer and 502 when it answers garbage', async () => {
    let garbage = false;
    const hv = new InMemoryHypervisor({
      bootDelayMs: 10,
      sidecar: async (spec) => {
        if (spec.name !== 'bad') return startLocalGuest(spec);
        // An "agent" that is healthy enough to boot, then answers garbage or 500s.
        const srv = createServer((req, res) => {
          if (req.url?.startsWith('/health') && !garbage)
            return void res.end(
              JSON.stringify({
                hostname: 'bad',
                agent_version: 'x',
                agent_uptime_sec: 1,
                userdata_ran: true,
                readiness: {},
              }),
            );
          if (req.url?.startsWith('/stats')) return void res.writeHead(500).end('kaboom');
          res.end('this is not json');
        });
        await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
        return { port: (srv.address() as AddressInfo).port, pid: process.pid, stop: async () => void srv.close() };
      },
    });
    const d = await startTestDaemon({}, { hypervisor: hv });
    try {
      expect((await d.call('POST', '/vms', { name: 'bad' })).status).to.equal(201);
      garbage = true;
      const h = await d.call('GET', '/vms/bad/agent/health');
      expect(h.status).to.equal(502);
      expect(h.json.error).to.match(/garbage/);
      expect((await d.call('GET', '/vms/bad/stats')).status).to.equal(502);
      expect((await d.call('POST', '/vms', { name: 'ok' })).status).to.equal(201);
      const pid = Number(
        readFileSync(join(d.config.data_dir, 'vms', 'ok', 'guest', 'run', 'svc', 'agent.pid'), 'utf8'),
      );
      process.kill(pid, 'SIGSTOP');
      try {
        const t = await d.call('GET', '/vms/ok/agent/health');
        expect(t.status).to.equal(503);
        expect(t.json.error).to.match(/unavailable/);
      } finally {
        process.kill(pid, 'SIGCONT');
      }
    } finally {
      await d.stop();
      await hv.release();
    }
  });

  it('re-opens live forwards and keeps the ring after a daemon restart', async () => {
    const hv = new InMemoryHypervisor({ bootDelayMs: 10, sidecar: startLocalGuest });
    const d = await startTestDaemon(
      { sandbox_metrics_interval: '200ms', sandbox_metrics_points: 50 },
      { hypervisor: hv },
    );
    const echo = await echoServer();
    try {
      await d.call('POST', '/vms', { name: 'p', persistent: true });
      const { host_port } = (await d.call('POST', '/vms/p/forwards', { guest_port: echo.port })).json;
      expect(await echoThrough(host_port, 'before')).to.equal('before');
      await new Promise((r) => setTimeout(r, 700));
      const before = (await d.call('GET', '/vms/p/metrics')).json.points.length;
      expect(before).to.be.at.least(2);
      await d.restart();
      const inst = (await d.call('GET', '/vms/p')).json;
      expect(inst.status).to.equal('running');
      expect(inst.forwards.find((f: { kind: string }) => f.kind === 'live')).to.include({ host_port });
      expect(await echoThrough(host_port, 'after restart')).to.equal('after restart');
      await new Promise((r) => setTimeout(r, 500));
      const after = (await d.call('GET', '/vms/p/metrics')).json.points.length;
      expect(after).to.be.above(before);
      // Disabling sampling by config keeps the history readable.
    } finally {
      echo.server.close();
      await d.stop();
      await hv.release();
    }
  });
});

function rawGet(d: TestDaemon, path: string): Promise<{ type: string; body: Buffer }> {
  return new Promise((resolve, reject) => {
    request({ socketPath: d.config.socket, path, headers: { authorization: 'Bearer test-token' } }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () =>
        resolve({ type: String(res.headers['content-type']).split(';')[0], body: Buffer.concat(parts) }),
      );
    })
      .on('error', reject)
      .end();
  });
}
