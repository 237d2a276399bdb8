import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { parse } from 'yaml';
import { CLIENT_ROUTES, DaemonUnreachableError, SvcClient, SvcError } from '../../src/index.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

describe('SvcClient against a real daemon', function () {
  this.timeout(60000);
  let d: TestDaemon;
  let c: SvcClient;
  before(async () => {
    d = await startTestDaemon({ fake_agent: true });
    c = new SvcClient({ socket: d.config.socket, token: 'test-token', env: {} });
  });
  after(async () => d.stop());

  it("covers every route of the OpenAPI document (but /mcp, which MCP clients speak, the dashboard's /ui, and what only nodes call)", async () => {
    const doc = parse(await c.openapi()) as { paths: Record<string, Record<string, Record<string, unknown>>> };
    const documented = Object.entries(doc.paths)
      .filter(([p]) => p !== '/mcp' && p !== '/ui' && !p.startsWith('/ui/'))
      .flatMap(([p, ops]) =>
        Object.entries(ops)
          .filter(([, o]) => !o['x-svc-internal'])
          .map(([m]) => `${m} ${p}`),
      )
      .sort();
    expect([...CLIENT_ROUTES].sort()).to.deep.equal(documented);
  });

  it('drives the lifecycle and raises typed errors with the status and text', async () => {
    expect(await c.healthz()).to.deep.equal({ status: 'ok' });
    expect((await c.info()).api_version).to.equal('0.2.2');
    const phases: string[] = [];
    for await (const e of c.createStream({ name: 'cl', persistent: true })) phases.push(e.phase);
    expect(phases.at(-1)).to.equal('ready');
    expect((await c.list()).map((i) => i.name)).to.deep.equal(['cl']);
    await c.pause('cl');
    const err = await c.pause('cl').catch((e) => e);
    expect(err).to.be.instanceOf(SvcError);
    expect(err.status).to.equal(400);
    expect(err.message).to.equal('vm cl is already paused; use resume');
    expect(err.code).to.equal('invalid_state');
    await c.resume('cl');
    expect((await c.get('cl')).status).to.equal('running');
    const nf = await c.get('ghost').catch((e) => e);
    expect(nf.status).to.equal(404);
    const unauth = await new SvcClient({ socket: d.config.socket, env: {} }).list().catch((e) => e);
    expect(unauth.status).to.equal(401);
    const gone = await new SvcClient({ socket: join(d.dir, 'nope.sock'), env: {} }).list().catch((e) => e);
    expect(gone).to.be.instanceOf(DaemonUnreachableError);
    expect(gone.message).to.match(/start it with/);
    const overTcp = new SvcClient({ api: `http://127.0.0.1:${d.tcp.port}`, token: 'test-token', env: {} });
    expect((await overTcp.get('cl')).name).to.equal('cl');
    // A stopped VM's shape, changed for its next start.
    await c.shutdown('cl');
    expect(await c.edit('cl', { cpus: 2, memory_mb: 384 })).to.include({ cpus: 2, memory_mb: 384, status: 'stopped' });
    expect((await c.edit('cl', { disk_gb: 1 }).catch((e) => e)).message).to.match(/a disk only grows/);
    expect(await c.start('cl')).to.include({ cpus: 2, status: 'running' });
  });

  it('streams exec frames, uploads and downloads streams, and runs fs, secrets, forwards, shell and logs', async () => {
    const frames = [];
    for await (const f of c.execStream(
      'cl',
      { cmd: 'cat', args: [] },
      Readable.from([Buffer.from('via '), Buffer.from('stdin')]),
    ))
      frames.push(f);
    expect(
      frames
        .filter((f) => f.type === 'stdout')
        .map((f) => f.data)
        .join(''),
    ).to.equal('via stdin');
    expect((await c.exec('cl', { cmd: 'sh', args: ['-c', 'exit 9'] })).exit_code).to.equal(9);
    // env reaches the command, on the exec channel (no stdin) and over HTTP (stdin)
    const env = { A: 'x y=z', B: 'ünï' };
    const show = { cmd: 'sh', args: ['-c', 'printf "%s|%s" "$A" "$B"'], env };
    expect((await c.exec('cl', show)).stdout).to.equal('x y=z|ünï');
    expect((await c.exec('cl', show, Buffer.from('in'))).stdout).to.equal('x y=z|ünï');
    const root = join(d.config.data_dir, 'vms', 'cl', 'guest');
    const data = randomBytes(1 << 20);
    await c.upload('cl', { path: join(root, 'x.bin') }, Readable.from([data]));
    const { body, size } = await c.download('cl', join(root, 'x.bin'));
    const parts: Buffer[] = [];
    for await (const p of body) parts.push(p as Buffer);
    expect(size).to.equal(data.length);
    expect(Buffer.concat(parts).equals(data)).to.equal(true);
    await c.mkdir('cl', join(root, 'd'), { recursive: true });
    await c.symlink('cl', join(root, 'd', 'l'), 'x');
    expect((await c.readdir('cl', join(root, 'd'))).map((e) => e.name)).to.deep.equal(['l']);
    expect((await c.stat('cl', join(root, 'd', 'l'))).target).to.equal('x');
    await c.remove('cl', join(root, 'd'), { recursive: true });
    await c.setSecret({ name: 'S', value: 'v' });
    expect((await c.injectSecret('cl', 'S')).mode).to.equal('0600');
    expect((await c.listSecrets()).map((s) => s.name)).to.deep.equal(['S']);
    await c.deleteSecret('S');
    const f = await c.addForward('cl', { guest_port: 9 });
    expect((await c.removeForward('cl', f.host_port)).host_port).to.equal(f.host_port);
    const sh = await c.shell('cl', { shell: '/bin/sh', cols: 50, rows: 10 });
    let out = '';
    sh.onData((b) => (out += b.toString()));
    sh.write('stty size; exit 2\n');
    expect(await sh.exited).to.equal(2);
    expect(out).to.contain('10 50');
    const log: Buffer[] = [];
    for await (const b of c.logs('cl')) log.push(b);
    expect(Buffer.concat(log).toString()).to.match(/\[fake\] cl booted/);
    // a read says which byte of the log it starts at, and from= goes on from there
    const whole = Buffer.concat(log);
    const end = await c.logsAt('cl', { tail: 5 });
    expect(end.offset).to.equal(whole.length - 5);
    const rest: Buffer[] = [];
    for await (const b of (await c.logsAt('cl', { from: end.offset + 2 })).chunks) rest.push(b);
    expect(Buffer.concat(rest)).to.deep.equal(whole.subarray(-3));
    // past the end: the log was cut since (rotated at its cap), so it is read from its start, and said so
    const past = await c.logsAt('cl', { from: whole.length + 100 });
    expect(past.offset).to.equal(0);
    for await (const b of past.chunks) void b;
    expect((await c.logsAt('cl', { tail: 5, from: 1 }).catch((e) => e)).message).to.match(
      /give from or tail, not both/,
    );
    expect((await c.agentHealth('cl')).userdata_ran).to.equal(true);
    expect((await c.stats('cl')).cpus).to.be.at.least(1);
    expect((await c.metricsHistory('cl')).name).to.equal('cl');
    expect((await c.activity({ limit: 2 })).length).to.equal(2);
    expect(await c.metricsText()).to.match(/svc_vms_running 1/);
    expect((await c.deployAgent('cl')).name).to.equal('cl');
    await c.suspend('cl');
    expect((await c.restore('cl')).status).to.equal('running');
    await c.shutdown('cl');
    expect((await c.start('cl')).status).to.equal('running');
    expect((await c.delete('cl')).name).to.equal('cl');
    expect((await c.create({}, { wait: 'ssh' })).name).to.equal('vm-1');
  });

  it('runs the embedding example from docs/embedding.md', () => {
    const out = execFileSync(process.execPath, [fileURLToPath(new URL('../../examples/embed.js', import.meta.url))], {
      encoding: 'utf8',
    });
    expect(JSON.parse(out)).to.deep.equal({
      created: 'running',
      restored: 'running',
      launched: ['embedded', 'embedded (restore)'],
      left: 0,
    });
  });
});
