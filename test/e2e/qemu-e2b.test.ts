import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CommandExitError, Sandbox, Template, Volume } from 'e2b';
import { Sandbox as CodeInterpreter } from '@e2b/code-interpreter';
import { tempDir, type TestDaemon } from '../helpers/daemon.js';
import { e2bOptions } from '../helpers/e2b.js';
import { expectPtyFollowsResize } from '../helpers/e2b-pty.js';
import { call } from '../helpers/http.js';
import { startSeededDaemon } from './snapshot-seeds.js';
import { main as codeAgent } from '../../examples/e2b/code-agent.js';
import { poll } from '../helpers/wait.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The official `e2b` SDK (the version pinned in package.json), unchanged, against svcd on real
 * QEMU guests (`minimal`: E2B's `/bin/bash -l -c` runs in its `sh`), through E2B_API_URL and
 * E2B_SANDBOX_URL's options.
 */
describe('E2B API on real QEMU guests: the official SDK', function () {
  this.timeout(900_000);
  let d: TestDaemon;
  const opts = () => e2bOptions(d);

  before(async () => {
    d = await startSeededDaemon(
      { kind: 'minimal', memory_mb: 384 },
      {
        warm_pool: { template: 'tpl', size: 2 },
        sandbox_metrics_enabled: false,
        ready_timeout: '240s',
      },
    );
  });
  after(async () => {
    for (const vm of (await d.call('GET', '/vms')).json as { name: string }[])
      await d.call('DELETE', `/vms/${vm.name}`).catch(() => undefined);
    await d.stop();
  });

  it('runs commands, a background server a second client connects to, files and a watch; pause and connect keep both', async () => {
    const s = await Sandbox.create({ ...opts(), metadata: { run: 'e2e' }, envs: { WHO: 'svc' } });
    const r = await s.commands.run('echo "hi $WHO"; uname -s');
    expect(r.stdout).to.equal('hi svc\nLinux\n');
    const bad = await s.commands.run('ls /nonexistent').catch((e: unknown) => e);
    expect(bad).to.be.instanceOf(CommandExitError);

    // a server in the background (busybox httpd), reached from inside, seen and killed by a second client
    await s.files.write('/srv/www/index.html', 'served\n');
    const server = await s.commands.run('httpd -f -p 8080 -h /srv/www', { background: true });
    const other = await Sandbox.connect(s.sandboxId, opts());
    expect((await other.commands.list()).map((p) => p.pid)).to.include(server.pid);
    let got = '';
    for (let i = 0; i < 50 && got !== 'served\n'; i++) {
      got = (await other.commands.run('wget -qO- http://127.0.0.1:8080/ || true')).stdout;
      if (got !== 'served\n') await sleep(200);
    }
    expect(got).to.equal('served\n');
    // and from this host at getHost(8080), the daemon's listener routing by Host (*.localhost is not
    // resolved by this machine's resolver, so the Host is given)
    const viaHost = () => call({ port: d.tcp.port }, 'GET', '/index.html', undefined, { host: s.getHost(8080) });
    expect((await viaHost()).text).to.equal('served\n');

    const events: string[] = [];
    const w = await s.files.watchDir('/srv/www', (e) => void events.push(`${e.type} ${e.name}`));
    await s.files.write('/srv/www/new.txt', 'new');
    await poll(() => events.includes('write new.txt'), { ms: 10_000, every: 100 });
    await w.stop();
    expect(events).to.include('create new.txt');
    expect((await s.files.list('/srv/www')).map((e) => e.name).sort()).to.deep.equal(['index.html', 'new.txt']);

    await s.pause();
    expect((await Sandbox.getInfo(s.sandboxId, opts())).state).to.equal('paused');
    expect((await viaHost()).json).to.include({ code: 409 });
    const back = await Sandbox.connect(s.sandboxId, opts());
    expect(await back.files.read('/srv/www/new.txt')).to.equal('new');
    expect((await viaHost()).text, 'the port is served again after the connect').to.equal('served\n');
    expect((await back.commands.list()).map((p) => p.pid)).to.include(server.pid);
    expect((await back.commands.run('wget -qO- http://127.0.0.1:8080/')).stdout).to.equal('served\n');
    expect(await back.commands.kill(server.pid)).to.equal(true);
    await back.kill();
  });

  it('forks a running sandbox with its server running, and snapshots it into a template', async () => {
    const s = await Sandbox.create(opts());
    await s.files.write('/root/state.txt', 'first');
    const server = await s.commands.run('httpd -f -p 8080 -h /root', { background: true });
    const [fork] = await Sandbox.fork(s.sandboxId, { ...opts(), count: 1 });
    const f = fork as Sandbox;
    // The fork's server runs on in it, serving the fork's own disk; the source's later write is its own.
    await s.files.write('/root/state.txt', 'second');
    expect((await f.commands.run('wget -qO- http://127.0.0.1:8080/state.txt')).stdout).to.equal('first');
    expect((await f.commands.list()).map((p) => p.pid)).to.include(server.pid);
    expect(await s.files.read('/root/state.txt')).to.equal('second');
    const snap = await Sandbox.createSnapshot(s.sandboxId, { ...opts(), name: 'e2e-snap' });
    await s.files.write('/root/state.txt', 'third');
    const b = await Sandbox.create({ ...opts(), template: 'e2e-snap' } as never);
    expect(await b.files.read('/root/state.txt')).to.equal('second');
    expect((await b.commands.run('hostname')).stdout.trim()).to.equal(b.sandboxId);
    for (const x of [f, b, s]) await x.kill();
    expect(await Sandbox.deleteSnapshot(snap.snapshotId, opts())).to.equal(true);
  });

  it('runs the examples/e2b code agent unchanged, pointed at svc by environment variables', async () => {
    const saved = { ...process.env };
    Object.assign(process.env, {
      E2B_API_URL: opts().apiUrl,
      E2B_SANDBOX_URL: opts().sandboxUrl,
      E2B_API_KEY: opts().apiKey,
    });
    try {
      const t = await codeAgent();
      expect(t[0]).to.match(/^step1\.sh: ok: kernel: \d/);
      expect(t[1]).to.equal('step2.sh: ok: square of 1 is 1\nsquare of 2 is 4\nsquare of 3 is 9');
      expect(t[2]).to.equal('step3.sh: exit 2: this step fails');
      expect(t[3]).to.equal('files: step1.sh, step2.sh, step3.sh');
    } finally {
      process.env = saved;
    }
  });

  it('runs the rest of the SDK on a real guest: a terminal, stdin, metrics, listing, file operations, signed URLs, network options', async () => {
    const s = await Sandbox.create({ ...opts(), metadata: { suite: 'rest' } });
    // a terminal that follows a resize and ends on exit
    await expectPtyFollowsResize(s);
    // stdin to a command in the background
    const h = await s.commands.run('read line; echo "got $line"', { background: true, stdin: true });
    await s.commands.sendStdin(h.pid, 'there\n');
    expect((await h.wait()).stdout).to.equal('got there\n');
    // metrics from the guest's agent
    const [m] = await s.getMetrics();
    expect(m.cpuCount).to.be.at.least(1);
    expect(m.memTotal).to.be.above(100 * 2 ** 20);
    expect(m.memUsed).to.be.within(1, m.memTotal);
    // listing by metadata
    const listed = await Sandbox.list({ ...opts(), query: { metadata: { suite: 'rest' } } }).nextItems();
    expect(listed.map((x) => x.sandboxId)).to.deep.equal([s.sandboxId]);
    // file operations
    await s.files.write('/root/ops/a.txt', 'alpha');
    expect(await s.files.exists('/root/ops/a.txt')).to.equal(true);
    expect((await s.files.getInfo('/root/ops/a.txt')).size).to.equal(5);
    await s.files.rename('/root/ops/a.txt', '/root/ops/b.txt');
    expect(await s.files.exists('/root/ops/a.txt')).to.equal(false);
    expect(await s.files.makeDir('/root/ops/sub')).to.equal(true);
    await s.files.remove('/root/ops/sub');
    expect((await s.files.list('/root/ops')).map((e) => e.name)).to.deep.equal(['b.txt']);
    // signed URLs, from this host without the SDK
    const form = new FormData();
    form.append('file', new Blob(['signed hello']), 'signed.txt');
    expect((await fetch(await s.uploadUrl('/root/ops/signed.txt'), { method: 'POST', body: form })).status).to.equal(
      200,
    );
    const down = await s.downloadUrl('/root/ops/signed.txt', { useSignatureExpiration: 60 });
    expect(await (await fetch(down)).text()).to.equal('signed hello');
    // network options: the guest's egress policy, live
    await s.updateNetwork({ allowInternetAccess: false });
    expect((await s.getInfo()).allowInternetAccess).to.equal(false);
    expect((await d.call('GET', `/vms/${s.sandboxId}/egress`)).json).to.include({ default: 'deny' });
    await s.kill();
  });

  it("refuses the code interpreter's template on an image without python3, leaving no sandbox behind", async () => {
    const before = ((await d.call('GET', '/vms')).json as { name: string }[]).map((v) => v.name);
    const err = await CodeInterpreter.create(opts()).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(Error);
    expect((err as Error).message).to.match(/needs \/usr\/bin\/python3 in the VM's image/);
    const after = ((await d.call('GET', '/vms')).json as { name: string }[]).map((v) => v.name);
    expect(after.filter((n) => !before.includes(n) && n.startsWith('e2b-'))).to.deep.equal([]);
  });

  it('kills a sandbox when its timeout passes', async () => {
    const s = await Sandbox.create({ ...opts(), timeoutMs: 60_000 });
    await s.setTimeout(1_000);
    await poll(async () => (await d.call('GET', `/vms/${s.sandboxId}`)).status === 404, { ms: 20_000, every: 200 });
    expect((await d.call('GET', `/vms/${s.sandboxId}`)).status).to.equal(404);
  });

  it('builds a template with Template.build (RUN, COPY, a server as its start command) that sandboxes start from with the server running', async () => {
    const ctx = tempDir('svc-e2e-tpl-');
    writeFileSync(join(ctx, 'index.html'), 'served from a template\n');
    const template = Template({ fileContextPath: ctx })
      .fromBaseImage()
      .setEnvs({ MODE: 'built' })
      .runCmd('mkdir -p /srv/www && echo "$MODE" > /srv/www/mode.txt')
      .copy('index.html', '/srv/www/')
      .setWorkdir('/srv/www')
      .setStartCmd('httpd -f -p 8081 -h /srv/www', 'wget -qO- http://127.0.0.1:8081/mode.txt');
    const info = await Template.build(template, 'e2e-web', opts());
    const s = await Sandbox.create('e2e-web', opts());
    // The build's steps were the build's processes; the start command's is the template's, and the clone's.
    const procs = (await call(d.tcp, 'GET', `/vms/${s.sandboxId}/processes`)).json as { tag?: string; state: string }[];
    expect(procs.map((p) => [p.tag, p.state])).to.deep.equal([['e2b-start', 'running']]);
    // The clone's copy of the start command's server answers at once, from the template's files.
    expect((await s.commands.run('wget -qO- http://127.0.0.1:8081/index.html')).stdout).to.equal(
      'served from a template\n',
    );
    expect((await s.commands.run('cat mode.txt; echo $MODE')).stdout).to.equal('built\nbuilt\n');
    await s.kill();
    expect((await call(d.tcp, 'DELETE', `/e2b/templates/${info.templateId}`)).status).to.equal(204);
    expect(await Template.exists('e2e-web', opts())).to.equal(false);
  });

  it('builds a template from a Dockerfile (Template.fromDockerfile: ENV, WORKDIR, COPY to ./, RUN, CMD as its start command)', async () => {
    const ctx = tempDir('svc-e2e-dockerfile-');
    writeFileSync(join(ctx, 'index.html'), 'from a Dockerfile\n');
    const dockerfile = [
      'FROM e2bdev/base',
      'ENV APP=dock',
      'WORKDIR /app',
      'COPY index.html ./',
      'RUN echo "$APP" > mode.txt',
      'CMD ["httpd", "-f", "-p", "8082", "-h", "/app"]',
    ].join('\n');
    // The SDK makes a CMD's ready command a 20 s wait; a check of the server is quicker.
    const template = Template({ fileContextPath: ctx })
      .fromDockerfile(dockerfile)
      .setReadyCmd('wget -qO- http://127.0.0.1:8082/mode.txt');
    await Template.build(template, 'e2e-dockerfile', opts());
    const s = await Sandbox.create('e2e-dockerfile', opts());
    const r = await s.commands.run('wget -qO- http://127.0.0.1:8082/index.html; cat mode.txt; echo $APP');
    expect(r.stdout, r.stderr).to.equal('from a Dockerfile\ndock\ndock\n');
    await s.kill();
    expect((await call(d.tcp, 'DELETE', '/e2b/templates/e2e-dockerfile')).status).to.equal(204);
  });

  it('mounts a volume in a sandbox (9p): what the guest writes there the Volume API reads, and the other way; a pause keeps its process', async () => {
    const o = opts();
    const v = await Volume.create('e2e-vol', o);
    await v.writeFile('/from-host.txt', 'host\n', o);
    const s = await Sandbox.create({ ...o, volumeMounts: { '/mnt/vol': v } });
    try {
      expect((await s.commands.run('cat /mnt/vol/from-host.txt')).stdout).to.equal('host\n');
      await s.commands.run(
        'mkdir -p /mnt/vol/out && echo guest > /mnt/vol/out/g.txt && ln -s /etc/passwd /mnt/vol/link',
      );
      expect(await v.readFile('/out/g.txt', o)).to.equal('guest\n');
      expect((await v.list('/', o)).map((e) => [e.name, e.type])).to.deep.equal([
        ['from-host.txt', 'file'],
        ['link', 'symlink'],
        ['out', 'directory'],
      ]);
      // the guest's link leads to the host's /etc/passwd once outside the guest: never followed
      const link = await v.readFile('/link', o).catch((e: unknown) => e);
      expect((link as Error).message).to.match(/is a link/);
      expect((await s.getInfo()).volumeMounts).to.deep.equal([{ name: 'e2e-vol', path: '/mnt/vol' }]);
      // Paused, it lets go of the volume and is saved; connected again, its process runs on and the volume is back.
      const bg = await s.commands.run('sleep 100000', { background: true });
      await s.pause();
      const back = await Sandbox.connect(s.sandboxId, o);
      expect((await back.commands.list()).map((p) => p.pid)).to.include(bg.pid);
      expect((await back.commands.run('cat /mnt/vol/from-host.txt')).stdout).to.equal('host\n');
    } finally {
      await s.kill();
    }
    expect(await Volume.destroy(v.volumeId, o)).to.equal(true);
  });

  it('creates two sandboxes at once from the warm pool of a template', async () => {
    expect((await d.call('POST', '/vms', { name: 'tpl', persistent: true })).status).to.equal(201);
    expect((await d.call('POST', '/vms/tpl/suspend')).status).to.equal(200);
    await d.daemon.poolSettled();
    const [a, b] = await Promise.all([Sandbox.create('tpl', opts()), Sandbox.create('tpl', opts())]);
    expect(a.sandboxId).to.not.equal(b.sandboxId);
    const [ha, hb] = await Promise.all([a.commands.run('hostname'), b.commands.run('hostname')]);
    expect([ha.stdout.trim(), hb.stdout.trim()]).to.deep.equal([a.sandboxId, b.sandboxId]);
    expect((await a.getInfo()).templateId).to.equal('tpl');
    await Promise.all([a.kill(), b.kill()]);
  });
});
