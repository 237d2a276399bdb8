import { expect } from 'chai';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startLocalAgent, type LocalAgent } from '../../src/adapters/hypervisor/fake/local-agent-process.js';
import type { ProcessInfo } from '../../src/domain/processes.js';
import { tempDir } from '../helpers/daemon.js';
import { call, type Target } from '../helpers/http.js';
import { waitFor } from '../helpers/wait.js';

/**
 * The real agent with `--entrypoint FILE` (what svc's init passes for an image with one): the
 * first agent of a boot starts the file's command as a durable process tagged entrypoint; one
 * started again in that boot does not. The command is a harmless `sh -c echo` (this host is the
 * "guest").
 */
describe('svc-agent --entrypoint (real agent process)', function () {
  this.timeout(60_000);
  let dir: string;
  let work: string;
  let file: string;
  let agent: LocalAgent | undefined;
  const flags = () => ['--entrypoint', file];
  const tagged = async (t: Target) =>
    ((await call(t, 'GET', '/processes')).json as ProcessInfo[]).filter((p) => p.tag === 'entrypoint');

  before(() => {
    dir = tempDir('svc-entrypoint-');
    work = join(dir, 'work dir');
    mkdirSync(work);
    file = join(dir, 'entrypoint.json');
    writeFileSync(
      file,
      JSON.stringify({ cmd: 'sh', args: ['-c', 'echo "entry in $PWD"; echo to-err >&2; exit 3'], cwd: work }),
    );
  });
  afterEach(async () => {
    await agent?.stop();
    agent = undefined;
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const until = <T>(what: string, f: () => Promise<T | undefined>) => waitFor(what, f, { ms: 10_000, every: 50 });

  it('starts the entrypoint once per boot, its output kept like any durable process', async () => {
    agent = await startLocalAgent(dir, {}, flags());
    const t = { port: agent.port };
    const p = await until('the entrypoint ended', async () => {
      const [e] = await tagged(t);
      return e?.state === 'ended' ? e : undefined;
    });
    expect(p).to.include({ cmd: 'sh', exit_code: 3, tag: 'entrypoint' });
    const out = await call(t, 'GET', `/processes/entrypoint/output`);
    const frames = out.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(frames.filter((f) => f.stream === 'stdout').map((f) => f.data)).to.deep.equal([`entry in ${work}\n`]);
    expect(frames.filter((f) => f.stream === 'stderr').map((f) => f.data)).to.deep.equal(['to-err\n']);
    expect(readFileSync(join(dir, 'agent.log'), 'utf8')).to.match(/"msg":"entrypoint started"/);

    // The agent killed and started again in the same boot: no second one.
    await agent.stop();
    agent = await startLocalAgent(dir, {}, flags());
    const again = { port: agent.port };
    await call(again, 'GET', '/health');
    await new Promise((r) => setTimeout(r, 500));
    expect((await tagged(again)).map((e) => e.id)).to.deep.equal([p.id]);

    // A new boot empties the run directory (a tmpfs in the guest): it starts again, with a new id.
    await agent.stop();
    rmSync(join(dir, 'guest', 'run-svc'), { recursive: true });
    agent = await startLocalAgent(dir, {}, flags());
    const boot2 = { port: agent.port };
    const ids = await until('a second entrypoint', async () => {
      const all = await tagged(boot2);
      return all.length === 2 ? all.map((e) => e.id) : undefined;
    });
    expect(ids[0]).to.equal(p.id);
    expect(ids[1]).to.not.equal(p.id);
  });

  it('starts it again by the restart policy the file gives (a create with entrypoint {restart})', async () => {
    rmSync(join(dir, 'guest', 'run-svc'), { recursive: true, force: true });
    writeFileSync(
      file,
      JSON.stringify({ cmd: 'sh', args: ['-c', 'echo again; exit 4'], restart: 'on-failure', max_restarts: 2 }),
    );
    agent = await startLocalAgent(dir, {}, flags());
    const t = { port: agent.port };
    const p = await until('the restarting entrypoint ended', async () => {
      const e = (await tagged(t)).at(-1);
      return e?.state === 'ended' && e.restart ? e : undefined;
    });
    expect(p).to.include({ exit_code: 4, restart: 'on-failure', max_restarts: 2, restarts: 2 });
    const out = await call(t, 'GET', `/processes/${p.id}/output`);
    const stdout = out.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((f) => f.stream === 'stdout')
      .map((f) => f.data)
      .join('');
    expect(stdout).to.equal('again\n'.repeat(3));
  });

  it('starts nothing from a file it cannot take, and says why in its log', async () => {
    rmSync(join(dir, 'guest', 'run-svc'), { recursive: true, force: true });
    writeFileSync(file, JSON.stringify({ cmd: 'sh', user: 'no-such-user-here' }));
    agent = await startLocalAgent(dir, {}, flags());
    const log = await until('the log line', async () => {
      const text = readFileSync(join(dir, 'agent.log'), 'utf8');
      return /entrypoint not started/.test(text) ? text : undefined;
    });
    expect(log).to.match(/no user no-such-user-here in the guest/);
    expect(
      (await tagged({ port: agent.port })).every((e) => e.args.length > 0),
      'only the first test',
    ).to.equal(true);
  });
});
