import { expect } from 'chai';
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { BuildError, Sandbox, Template, waitForFile } from 'e2b';
import { signAws } from '../../src/adapters/http-kit/aws-sigv4.js';
import { call } from '../helpers/http.js';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { e2bOptions } from '../helpers/e2b.js';
import type { Instance } from '../../src/domain/vm.js';
import { Hypervisor } from '../../src/ports/hypervisor.js';
import type { InMemoryHypervisor } from '../../src/adapters/hypervisor/fake/in-memory-hypervisor.js';
import { poll } from '../helpers/wait.js';

/**
 * E2B's template builds through the official SDK (`Template.build`) against svcd on the fake
 * hypervisor with local agents. Those "guests" are this host: every step here is harmless and
 * writes only under the test's own folder.
 */
describe('E2B API: templates built with the official SDK (local agents)', function () {
  this.timeout(60_000);
  let d: TestDaemon;
  let work: string;
  let ctx: string;
  const opts = () => e2bOptions(d);
  const made: Sandbox[] = [];
  const vms = async (): Promise<Instance[]> => (await d.call('GET', '/vms')).json;

  before(async () => {
    d = await startTestDaemon({ fake_agent: true });
    work = tempDir('svc-e2b-tpl-');
    ctx = tempDir('svc-e2b-ctx-');
    mkdirSync(join(ctx, 'app', 'sub'), { recursive: true });
    writeFileSync(join(ctx, 'app', 'main.py'), 'print("hi")\n');
    writeFileSync(join(ctx, 'app', 'sub', 'data.txt'), 'nested\n');
    writeFileSync(join(ctx, 'req.txt'), 'requests\n');
    writeFileSync(join(ctx, 'a.md'), 'a\n');
    writeFileSync(join(ctx, 'b.md'), 'b\n');
  });
  after(async () => {
    for (const s of made) await s.kill().catch(() => undefined);
    await d.stop();
  });

  it('builds a template from steps (ENV, RUN, WORKDIR, COPY, a start and a ready command), and sandboxes made from it carry its files, environment and folder', async () => {
    const t = join(work, 't');
    const template = Template({ fileContextPath: ctx })
      .fromBaseImage()
      .setEnvs({ GREETING: 'hello', PLACE: 'svc' })
      .runCmd(`mkdir -p ${t} && echo "$GREETING from $PLACE" > ${t}/env.txt`)
      .setWorkdir(`${t}/wd`)
      .runCmd('pwd > here.txt && echo a line of the build log')
      .copy('app', `${t}/app/`)
      .copy('req.txt', `${t}/r.txt`, { mode: 0o600 })
      .copy('*.md', `${t}/docs/`)
      .copy('a.md', 'rel/')
      .copy('req.txt', `${t}/nobody.txt`, { user: 'nobody' })
      .setStartCmd(`echo started > ${t}/started; sleep 30`, waitForFile(`${t}/started`));
    const logs: string[] = [];
    const info = await Template.build(template, 'py-app', { ...opts(), onBuildLogs: (l) => void logs.push(l.message) });
    expect(info.templateId).to.match(/^tpl-[0-9a-f]{16}$/);
    expect(logs.join('\n')).to.include('a line of the build log');
    expect(logs.join('\n')).to.match(/template py-app \(tpl-[0-9a-f]{16}\) is ready/);

    expect(readFileSync(join(t, 'env.txt'), 'utf8')).to.equal('hello from svc\n');
    expect(readFileSync(join(t, 'wd', 'here.txt'), 'utf8')).to.equal(`${t}/wd\n`);
    expect(readFileSync(join(t, 'app', 'main.py'), 'utf8')).to.equal('print("hi")\n');
    expect(readFileSync(join(t, 'app', 'sub', 'data.txt'), 'utf8')).to.equal('nested\n');
    expect(readFileSync(join(t, 'r.txt'), 'utf8')).to.equal('requests\n');
    expect(statSync(join(t, 'r.txt')).mode & 0o777).to.equal(0o600);
    expect(readFileSync(join(t, 'docs', 'a.md'), 'utf8')).to.equal('a\n');
    expect(readFileSync(join(t, 'docs', 'b.md'), 'utf8')).to.equal('b\n');
    expect(readFileSync(join(t, 'wd', 'rel', 'a.md'), 'utf8'), 'a relative COPY lands in the WORKDIR').to.equal('a\n');
    // owned by the step's user (the agent sets owners when it runs as root, as in a guest)
    if (process.getuid?.() === 0) expect(statSync(join(t, 'nobody.txt')).uid).to.equal(65534);
    expect(existsSync(join(t, 'started'))).to.equal(true);

    // The template is a suspended VM of svc's, not a sandbox.
    const tpl = (await vms()).filter((v) => v.tags['e2b/tpl_id'] === info.templateId);
    expect(tpl.map((v) => v.status)).to.deep.equal(['suspended']);
    expect(await Template.exists('py-app', opts())).to.equal(true);
    expect(await Template.exists('no-such-template', opts())).to.equal(false);

    // A sandbox from it: a clone, with the template's environment and working folder.
    const s = await Sandbox.create('py-app', { ...opts(), envs: { PLACE: 'here' } });
    made.push(s);
    expect((await d.call('GET', `/vms/${s.sandboxId}`)).json.from).to.equal(tpl[0].name);
    const r = await s.commands.run('echo "$GREETING from $PLACE in $(pwd)"');
    expect(r.stdout).to.equal(`hello from here in ${t}/wd\n`);
    const byId = await Sandbox.create(info.templateId, opts());
    made.push(byId);
    expect((await byId.commands.run('echo $GREETING')).stdout).to.equal('hello\n');
  });

  it('builds a name again: the newest build is the template, the one before goes', async () => {
    const first = (await vms()).find((v) => v.tags['e2b/tpl_name'] === 'py-app');
    expect(first).to.not.equal(undefined);
    await Template.build(Template().fromTemplate('py-app').setEnvs({ GREETING: 'again' }), 'py-app', opts());
    const now = (await vms()).filter((v) => v.tags['e2b/tpl_name'] === 'py-app');
    expect(now.map((v) => v.name)).to.not.include(first!.name);
    expect(now.length).to.equal(1);
    const s = await Sandbox.create('py-app', opts());
    made.push(s);
    // a template built from another carries on its environment and folder
    expect((await s.commands.run('echo $GREETING $PLACE; pwd')).stdout).to.equal(
      `again svc\n${join(work, 't', 'wd')}\n`,
    );
  });

  it('builds a template from a snapshot of a sandbox (Template.fromTemplate with its name)', async () => {
    const s = await Sandbox.create(opts());
    made.push(s);
    await s.commands.run(`mkdir -p ${work}/snap && echo in-snapshot > ${work}/snap/a.txt`);
    await Sandbox.createSnapshot(s.sandboxId, { ...opts(), name: 'snap-base' });
    await Template.build(
      Template().fromTemplate('snap-base').runCmd(`cat ${work}/snap/a.txt > ${work}/snap/b.txt`),
      'from-snap',
      opts(),
    );
    expect(readFileSync(join(work, 'snap', 'b.txt'), 'utf8')).to.equal('in-snapshot\n');
    const tpl = (await vms()).find((v) => v.tags['e2b/tpl_name'] === 'from-snap')!;
    const snap = (await vms()).find((v) => v.tags['e2b/snapshot_name'] === 'snap-base')!;
    expect(tpl.from).to.equal(snap.name);
  });

  it('keeps builds by tag: name:tag, build tags, assignTags, getTags, removeTags, a build id; a build no tag names goes', async () => {
    const make = (v: string) => Template().fromBaseImage().setEnvs({ V: v }).runCmd('true');
    const builds = async () => (await vms()).filter((v) => v.tags['e2b/tpl_name'] === 'tagged');
    const v1 = await Template.build(make('one'), 'tagged:v1', opts());
    const v2 = await Template.build(make('two'), 'tagged:v2', { ...opts(), tags: ['latest'] });
    expect(v2.tags).to.deep.equal(['v2', 'latest']);
    expect((await builds()).length, 'two builds, each named by a tag').to.equal(2);
    const v = async (ref: string) => {
      const s = await Sandbox.create(ref, opts());
      made.push(s);
      return (await s.commands.run('echo $V')).stdout.trim();
    };
    expect(await v('tagged:v1')).to.equal('one');
    expect(await v('tagged:latest')).to.equal('two');
    expect(await v(`tagged:${v1.buildId}`), 'a build by its id').to.equal('one');
    expect(await v(`${v1.templateId}:v2`), 'the template by its id').to.equal('two');
    const untagged = await Sandbox.create('tagged', opts()).catch((e: unknown) => e);
    expect((untagged as Error).message, 'no build is tagged default').to.match(
      /template tagged has no build tagged default \(its tags: latest, v1, v2\)/,
    );
    expect(await Template.exists('tagged', opts())).to.equal(true);

    expect(await Template.assignTags('tagged:v1', ['production', 'stable'], opts())).to.deep.equal({
      buildId: v1.buildId,
      tags: ['production', 'stable'],
    });
    expect(await v('tagged:production')).to.equal('one');
    const byTag = async () =>
      Object.fromEntries((await Template.getTags('tagged', opts())).map((t) => [t.tag, t.buildId]));
    expect(await byTag()).to.deep.equal({
      latest: v2.buildId,
      production: v1.buildId,
      stable: v1.buildId,
      v1: v1.buildId,
      v2: v2.buildId,
    });
    // a tag moved to another build
    await Template.assignTags('tagged:v2', 'stable', opts());
    expect((await byTag()).stable).to.equal(v2.buildId);

    // v1's build stays while a tag names it, and goes with its last tag
    await Template.removeTags('tagged', ['v1'], opts());
    expect((await builds()).map((b) => b.tags['e2b/tpl_build']).sort()).to.deep.equal([v1.buildId, v2.buildId].sort());
    await Template.removeTags('tagged', 'production', opts());
    expect((await builds()).map((b) => b.tags['e2b/tpl_build'])).to.deep.equal([v2.buildId]);
    expect(Object.keys(await byTag()).sort()).to.deep.equal(['latest', 'stable', 'v2']);
    const missing = await Template.removeTags('tagged', 'nope', opts()).catch((e: unknown) => e);
    expect((missing as Error).message).to.match(/has no tag nope/);

    // a build of the name alone is tagged default, and `tagged` names it
    await Template.build(make('three'), 'tagged', opts());
    expect(await v('tagged')).to.equal('three');
    expect(await v('tagged:default')).to.equal('three');
    expect((await builds()).length).to.equal(2);
  });

  it('answers a build made the same way from its cache (no VM, no step run), and builds again when told to skip it', async () => {
    const log = join(work, 'cache.log');
    const template = (line: string) => Template().fromBaseImage().runCmd(`echo ${line} >> ${log}`);
    const builds = async () => (await vms()).filter((v) => v.tags['e2b/tpl_name'] === 'cached');
    const first = await Template.build(template('run'), 'cached', opts());
    const lines: string[] = [];
    const again = await Template.build(template('run'), 'cached:again', {
      ...opts(),
      onBuildLogs: (l) => void lines.push(l.message),
    });
    expect(readFileSync(log, 'utf8'), 'the step ran once').to.equal('run\n');
    expect(lines.join('\n')).to.match(new RegExp(`cached: build ${first.buildId} `));
    expect((await builds()).map((b) => b.tags['e2b/tpl_build'])).to.deep.equal([first.buildId]);
    for (const ref of ['cached:again', `cached:${again.buildId}`]) {
      const s = await Sandbox.create(ref, opts());
      made.push(s);
      expect((await d.call('GET', `/vms/${s.sandboxId}`)).json.from).to.equal((await builds())[0].name);
    }
    expect(Object.fromEntries((await Template.getTags('cached', opts())).map((t) => [t.tag, t.buildId]))).to.deep.equal(
      { again: first.buildId, default: first.buildId },
    );

    // skipCache builds it again; the new build takes `default`, `again` keeps the first
    await Template.build(template('run'), 'cached', { ...opts(), skipCache: true });
    expect(readFileSync(log, 'utf8')).to.equal('run\nrun\n');
    expect((await builds()).length).to.equal(2);
    // a changed step is not the same build
    await Template.build(template('other'), 'cached:again', opts());
    expect(readFileSync(log, 'utf8')).to.equal('run\nrun\nother\n');
    expect((await builds()).length, 'the first build went with its last tag').to.equal(2);
    expect((await builds()).map((b) => b.tags['e2b/tpl_build'])).to.not.include(first.buildId);
  });

  it('fails a build at the step that fails, naming it, and leaves no VM behind', async () => {
    const before = (await vms()).length;
    const logs: string[] = [];
    const err = await Template.build(
      Template().fromBaseImage().runCmd('echo fine').runCmd('echo about to fail; exit 7'),
      'broken',
      { ...opts(), onBuildLogs: (l) => void logs.push(l.message) },
    ).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(BuildError);
    expect((err as Error).message).to.match(/step 2 failed: .*exited with 7/);
    expect(logs.join('\n')).to.include('about to fail');
    expect((await vms()).length).to.equal(before);
    expect(await Template.exists('broken', opts())).to.equal(false);
  });

  it('pulls a base from its registry once, as an svc image named after the reference, the pull in the build log', async () => {
    const logs: string[] = [];
    await Template.build(Template().fromImage('python:3.12').runCmd('echo on python'), 'on-python', {
      ...opts(),
      onBuildLogs: (l) => void logs.push(l.message),
    });
    // the tag's digest is asked first, and the pull is pinned to it
    const is = logs.find((l) => l.startsWith('docker://docker.io/library/python:3.12 is sha256:'));
    expect(is, logs.join('\n')).to.not.equal(undefined);
    const digest = is!.split(' ').pop()!;
    const pulled = logs.find((l) => l.startsWith(`pulling docker://docker.io/library/python@${digest} as image reg-`));
    expect(pulled, logs.join('\n')).to.not.equal(undefined);
    const image = pulled!.split(' ').pop()!;
    expect(image).to.match(new RegExp(`^reg-[a-f0-9]{16}-${digest.slice(7, 19)}$`));
    expect((await d.call('GET', `/images/${image}`)).status).to.equal(200);
    const again: string[] = [];
    await Template.build(Template().fromImage('docker.io/library/python:3.12').runCmd('echo again'), 'on-python-2', {
      ...opts(),
      onBuildLogs: (l) => void again.push(l.message),
    });
    expect(again.join('\n'), 'the same image, named whole, is not pulled again').to.not.include('pulling');
    expect(again.join('\n')).to.include(`"image":"${image}"`);
  });

  it('pulls a tag that moved again (its new version), and builds from the version pulled before when the registry does not answer', async () => {
    const hv = d.daemon.container.get<InMemoryHypervisor>(Hypervisor);
    const build = async (name: string) => {
      const logs: string[] = [];
      await Template.build(Template().fromImage('ruby:3').runCmd(`echo ${name}`), name, {
        ...opts(),
        onBuildLogs: (l) => void logs.push(`${l.level} ${l.message}`),
      });
      return logs.join('\n');
    };
    const pulledAs = (logs: string) =>
      /pulling docker:\/\/docker\.io\/library\/ruby@\S+ as image (\S+)/.exec(logs)?.[1];
    const first = pulledAs(await build('on-ruby-1'));
    expect(first).to.match(/^reg-/);
    expect(pulledAs(await build('on-ruby-2')), 'the same version is not pulled again').to.equal(undefined);
    hv.pushTag('docker.io/library/ruby:3');
    const second = pulledAs(await build('on-ruby-3'));
    expect(second, 'the new version is pulled').to.match(/^reg-/);
    expect(second).to.not.equal(first);
    expect(second!.slice(0, 20), 'named after the same reference').to.equal(first!.slice(0, 20));
    // both versions are images; the first stays for what stands on it
    expect((await d.call('GET', `/images/${first}`)).status).to.equal(200);
    // built again, on-ruby-1 stands on the new version: the first stays for on-ruby-2's build
    expect(await build('on-ruby-1')).to.include(`"image":"${second}"`);
    expect((await d.call('GET', `/images/${first}`)).status).to.equal(200);
    // and goes once nothing stands on it
    await build('on-ruby-2');
    await poll(async () => (await d.call('GET', `/images/${first}`)).status === 404, { ms: 10_000, every: 50 });
    expect((await d.call('GET', `/images/${first}`)).status, 'the older version pruned').to.equal(404);
    expect((await d.call('GET', `/images/${second}`)).status, 'the newest kept').to.equal(200);
    hv.registryDown = true;
    try {
      const offline = await build('on-ruby-4');
      expect(offline, offline).to.match(
        new RegExp(
          `^warn could not ask the registry what docker://docker.io/library/ruby:3 is now \\(.*the fake registry does not answer\\); building from image ${second}, pulled before$`,
          'm',
        ),
      );
      expect(pulledAs(offline)).to.equal(undefined);
      const err = await Template.build(Template().fromImage('never-pulled:1'), 'on-never', opts()).catch(
        (e: unknown) => e,
      );
      expect((err as Error).message, 'none pulled before: the build fails').to.match(
        /the fake registry does not answer/,
      );
    } finally {
      hv.registryDown = false;
    }
  });

  it('pulls a new image once for two builds from it at the same time: the second waits for the first', async () => {
    const logs: string[][] = [[], []];
    await Promise.all(
      logs.map((l, i) =>
        Template.build(Template().fromImage('node:22').runCmd(`echo build ${i}`), `on-node-${i}`, {
          ...opts(),
          onBuildLogs: (m) => void l.push(m.message),
        }),
      ),
    );
    const all = logs.map((l) => l.join('\n'));
    expect(
      all.filter((l) => l.includes('pulling docker://docker.io/library/node@sha256:')),
      all.join('\n---\n'),
    ).to.have.length(1);
    // the other waited for that pull, or (when the first's was over before it looked) found the image
    expect(
      all.filter((l) =>
        /waiting for another build's pull of docker:\/\/docker\.io\/library\/node@sha256:|image reg-\S+ was pulled meanwhile/.test(
          l,
        ),
      ),
      all.join('\n---\n'),
    ).to.have.length(1);
  });

  it("logs in to ECR with a token asked by a signed call (fromAWSRegistry), and to Google's registries as _json_key (fromGCPRegistry)", async () => {
    const hv = d.daemon.container.get<InMemoryHypervisor>(Hypervisor);
    const key = { accessKeyId: 'AKIAEXAMPLE0000001', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY' };
    const calls: Record<string, string | undefined>[] = [];
    // ECR's GetAuthorizationToken as AWS answers it: the signature checked with the key it knows
    const ecr = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const h = req.headers as Record<string, string | undefined>;
        calls.push({ target: h['x-amz-target'], type: h['content-type'], path: req.url, method: req.method });
        const at = (h['x-amz-date'] ?? '').replace(
          /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/,
          '$1-$2-$3T$4:$5:$6Z',
        );
        const expected = signAws(
          {
            method: req.method ?? '',
            url: new URL(`http://${h.host}${req.url}`),
            headers: { 'content-type': h['content-type'] ?? '', 'x-amz-target': h['x-amz-target'] ?? '' },
            body: Buffer.concat(chunks).toString(),
            service: 'ecr',
            region: 'eu-west-2',
          },
          key,
          new Date(at),
        ).authorization;
        if (h.authorization !== expected) {
          res.writeHead(400, { 'content-type': 'application/x-amz-json-1.1' });
          return res.end(
            JSON.stringify({
              __type: 'InvalidSignatureException',
              message: 'The request signature we calculated does not match the signature you provided.',
            }),
          );
        }
        res.writeHead(200, { 'content-type': 'application/x-amz-json-1.1' });
        res.end(
          JSON.stringify({
            authorizationData: [
              { authorizationToken: Buffer.from('AWS:ecr-pass-7').toString('base64'), expiresAt: 1.9e9 },
            ],
          }),
        );
      });
    });
    await new Promise<void>((r) => ecr.listen(0, '127.0.0.1', r));
    process.env.AWS_ENDPOINT_URL_ECR = `http://127.0.0.1:${(ecr.address() as AddressInfo).port}`;
    const build = (t: Parameters<typeof Template.build>[0], name: string) =>
      Template.build(t, name, opts()).then(
        () => 'built',
        (e: unknown) => (e as Error).message,
      );
    try {
      hv.registryLogin = { username: 'AWS', password: 'ecr-pass-7' };
      const ref = '123456789012.dkr.ecr.eu-west-2.amazonaws.com/app:1';
      expect(await build(Template().fromImage(ref).runCmd('echo x'), 'on-ecr'), 'no login').to.match(/unauthorized/);
      expect(
        await build(
          Template()
            .fromAWSRegistry(ref, { ...key, region: 'eu-west-2' })
            .runCmd('echo x'),
          'on-ecr',
        ),
      ).to.equal('built');
      expect(calls[0]).to.deep.equal({
        target: 'AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken',
        type: 'application/x-amz-json-1.1',
        path: '/',
        method: 'POST',
      });
      const wrong = { ...key, secretAccessKey: 'not-the-secret', region: 'eu-west-2' };
      expect(await build(Template().fromAWSRegistry(ref, wrong).runCmd('echo x'), 'on-ecr-2')).to.match(
        /ECR refused the login: InvalidSignatureException: The request signature we calculated/,
      );
      const account = { type: 'service_account', client_email: 'b@p.iam.gserviceaccount.com', private_key: 'k' };
      hv.registryLogin = { username: '_json_key', password: JSON.stringify(account) };
      const gcp = Template().fromGCPRegistry('europe-docker.pkg.dev/p/r/app:1', { serviceAccountJSON: account });
      expect(await build(gcp.runCmd('echo x'), 'on-gcp')).to.equal('built');
    } finally {
      hv.registryLogin = undefined;
      delete process.env.AWS_ENDPOINT_URL_ECR;
      ecr.close();
    }
  });

  it('refuses before building what svc cannot build: a registry it cannot log in to, a bad reference, an unknown base', async () => {
    const before = (await vms()).length;
    for (const [t, why] of [
      [
        Template().fromAWSRegistry('1.dkr.ecr.us-east-1.amazonaws.com/x:1', {
          accessKeyId: 'a',
          secretAccessKey: 'b',
          region: 'us-east-1',
        }),
        /the accessKeyId is not an access key id/,
      ],
      [
        Template().fromAWSRegistry('1.dkr.ecr.us-east-1.amazonaws.com/x:1', {
          accessKeyId: 'AKIAEXAMPLE0000001',
          secretAccessKey: 'b',
          region: 'us-east-1/../x',
        }),
        /"us-east-1\/..\/x" is not a region/,
      ],
      [
        Template().fromGCPRegistry('europe-docker.pkg.dev/p/r/x:1', { serviceAccountJSON: { nope: 1 } }),
        /needs a service account's key/,
      ],
      [Template().fromImage('Not A Reference!'), /is not a registry reference/],
      [Template().fromTemplate('no-such-base'), /no-such-base: not an svc image, template or snapshot/],
    ] as const) {
      const err = await Template.build(t, 'nope', opts()).catch((e: unknown) => e);
      expect((err as Error).message).to.match(why);
    }
    expect((await vms()).length, 'nothing was made').to.equal(before);
  });

  it('answers bad build calls with the status and message E2B clients expect', async () => {
    const key = { 'x-api-key': d.tcp.token ?? '' };
    const at = (m: string, path: string, body?: unknown, h: Record<string, string> = key) =>
      call({ port: d.tcp.port }, m, `/e2b${path}`, body, h);
    expect((await at('POST', '/v3/templates', { name: 'Bad Name' })).status).to.equal(400);
    expect((await at('POST', '/v3/templates', { name: 'ok', cpuCount: 0 })).json.message).to.match(/cpuCount/);
    expect((await at('POST', '/v3/templates', { name: 'ok' }, {})).status, 'the API key is checked').to.equal(401);
    const { templateID, buildID } = (await at('POST', '/v3/templates', { name: 'ok' })).json;
    const hash = 'a'.repeat(64);
    const link = (await at('GET', `/templates/${templateID}/files/${hash}`)).json;
    expect(link.present).to.equal(false);
    const url = new URL(link.url);
    const forged = await call(
      { port: d.tcp.port },
      'PUT',
      `${url.pathname}?token=${'0'.repeat(64)}`,
      Buffer.from('x'),
      {
        'content-type': 'application/octet-stream',
      },
    );
    expect(forged.status).to.equal(400);
    expect(forged.json.message).to.match(/not an upload link svc gave/);
    const bad = [
      [{ steps: [{ type: 'RUN' }] }, /RUN needs its argument/],
      [{ steps: [{ type: 'COPY', args: ['a', '/b'] }] }, /COPY needs the hash/],
      [{ steps: [{ type: 'HEALTHCHECK', args: ['x'] }] }, /does not build HEALTHCHECK/],
      [{ steps: [{ type: 'RUN', args: [1] }] }, /args must be a list of strings/],
      [{ steps: [null] }, /step 1 must be an object/],
      [
        { steps: [{ type: 'COPY', args: ['a', '/b', '', '9x9'], filesHash: 'a'.repeat(64) }] },
        /COPY mode 9x9 is not octal/,
      ],
      [{ startCmd: 5 }, /startCmd must be a string/],
      // a base that is not there: the build is given back, and can be started again
      [{ fromTemplate: 'no-such-base' }, /no-such-base: not an svc image, template or snapshot/],
      [{ steps: [{ type: 'ENV', args: ['BAD-NAME', 'x'] }] }, /ENV "BAD-NAME": svc takes names/],
      [{ steps: [{ type: 'ENV', args: ['BIG', 'x'.repeat(3000)] }] }, /values of at most 2048/],
      [
        { steps: [{ type: 'ENV', args: Array.from({ length: 41 }, (_, i) => [`V${i}`, 'x']).flat() }] },
        /at most 40 environment variables/,
      ],
    ] as const;
    for (const [body, why] of bad) {
      const r = await at('POST', `/v2/templates/${templateID}/builds/${buildID}`, body);
      expect(r.status, JSON.stringify(body)).to.be.oneOf([400, 501]);
      expect(r.json.message).to.match(why);
    }
    expect((await at('GET', `/templates/${templateID}/builds/nope/status`)).status).to.equal(404);
    const tags = await Template.assignTags('ok:v1', 'prod', opts()).catch((e: unknown) => e);
    expect((tags as Error).message, 'a build not made yet has no tags').to.match(/template build ok:v1 not found/);
    expect((await at('POST', '/templates/tags', { target: 'py-app', tags: ['no/slash'] })).status).to.equal(400);
    expect((await at('POST', '/v3/templates', { name: 'ok:bad tag' })).json.message).to.match(/tag "bad tag"/);
    expect((await at('GET', '/templates/..%2Fetc/tags')).status).to.equal(404);
    const status = (await at('GET', `/templates/${templateID}/builds/${buildID}/status`)).json;
    expect(status).to.include({ status: 'waiting', templateID, buildID });
  });

  it('removes at its start the VM of a build a stop cut off, and the defaults of templates gone, keeping built templates', async () => {
    const cut = await d.call('POST', '/vms', {
      name: 'e2b-tpl-cut0ff',
      persistent: true,
      tags: { 'e2b/tpl_id': 'tpl-0000000000000000', 'e2b/tpl_name': 'cut', 'e2b/tpl_build': 'gone' },
    });
    expect(cut.status, cut.text).to.equal(201);
    const records = join(d.config.data_dir, 'e2b', 'templates');
    writeFileSync(join(records, 'e2b-tpl-deleted.json'), '{"envs":{}}\n');
    // a build of `tagged` that no tag names: what a stop between a change of tags and its deletes leaves
    const tagged = (await vms()).find((v) => v.tags['e2b/tpl_name'] === 'tagged')!;
    const stray = await d.call('POST', '/vms', {
      name: 'e2b-tpl-stray0',
      persistent: true,
      tags: { 'e2b/tpl_id': tagged.tags['e2b/tpl_id'], 'e2b/tpl_name': 'tagged', 'e2b/tpl_build': 'strayb' },
    });
    expect(stray.status, stray.text).to.equal(201);
    expect((await d.call('POST', '/vms/e2b-tpl-stray0/suspend')).status).to.equal(200);
    const taggedBuilds = (await vms()).filter(
      (v) => v.tags['e2b/tpl_name'] === 'tagged' && v.name !== 'e2b-tpl-stray0',
    );
    const kept = (await vms()).find((v) => v.tags['e2b/tpl_name'] === 'py-app')!;
    // a template from before svc kept tags has no tag file: its newest build is its default
    const tagFiles = join(d.config.data_dir, 'e2b', 'tags');
    rmSync(join(tagFiles, `${kept.tags['e2b/tpl_id']}.json`));
    writeFileSync(join(tagFiles, 'tpl-00000000000000ff.json'), '{"tags":{},"same":{}}\n');
    // builds the SDK asks about across the restart: one that ended, one requested and not started,
    // and one under way when the daemon stops
    const ended = { templateId: kept.tags['e2b/tpl_id'], buildId: kept.tags['e2b/tpl_build'] };
    expect((await Template.getBuildStatus(ended, opts())).status).to.equal('ready');
    const key = { 'x-api-key': d.tcp.token ?? '' };
    const waiting = (await call({ port: d.tcp.port }, 'POST', '/e2b/v3/templates', { name: 'later' }, key)).json;
    const hash = 'c'.repeat(64);
    const link = new URL(
      (await call({ port: d.tcp.port }, 'GET', `/e2b/templates/${waiting.templateID}/files/${hash}`, undefined, key))
        .json.url,
    );
    const running = await Template.buildInBackground(Template().fromBaseImage().runCmd('sleep 60'), 'cut-off', opts());
    const runningVm = async () => (await vms()).find((v) => v.tags['e2b/tpl_build'] === running.buildId);
    await poll(async () => (await runningVm()) !== undefined, { ms: 20_000, every: 100 });
    expect(await runningVm(), 'the build under way has its VM').to.not.equal(undefined);
    expect((await Template.getBuildStatus(running, opts())).status).to.equal('building');
    await d.restart();
    expect((await Template.getBuildStatus(ended, opts())).status, 'a build that ended, after the restart').to.equal(
      'ready',
    );
    const later = await Template.getBuildStatus({ templateId: waiting.templateID, buildId: waiting.buildID }, opts());
    expect(later.status, 'a build requested, not started').to.equal('waiting');
    const put = await call({ port: d.tcp.port }, 'PUT', `${link.pathname}${link.search}`, Buffer.from('tar'), {
      'content-type': 'application/octet-stream',
    });
    expect(put.status, `an upload link given before the restart: ${put.text}`).to.equal(201);
    const cutOff = await Template.getBuildStatus(running, opts());
    expect(cutOff.status, 'a build the stop cut off').to.equal('error');
    // the sweep runs after the daemon listens: VMs first, then the tags' files, then the records
    const swept = async () =>
      !(await vms()).some((v) => v.name === 'e2b-tpl-cut0ff' || v.name === 'e2b-tpl-stray0') &&
      !existsSync(join(tagFiles, 'tpl-00000000000000ff.json')) &&
      !existsSync(join(records, 'e2b-tpl-deleted.json'));
    await poll(swept, { every: 100 });
    const names = (await vms()).map((v) => v.name);
    expect(names).to.not.include('e2b-tpl-cut0ff');
    await poll(async () => (await runningVm()) === undefined, { every: 100 });
    expect(await runningVm(), 'the VM of the build the stop cut off').to.equal(undefined);
    expect(names, 'a build no tag names').to.not.include('e2b-tpl-stray0');
    expect(names, 'the builds tags name').to.include.members(taggedBuilds.map((v) => v.name));
    expect(names).to.include(kept.name);
    expect(existsSync(join(records, 'e2b-tpl-deleted.json'))).to.equal(false);
    expect(existsSync(join(records, `${kept.name}.json`))).to.equal(true);
    expect(existsSync(join(tagFiles, 'tpl-00000000000000ff.json')), 'the tags of a template gone').to.equal(false);
    expect((await Template.getTags('py-app', opts())).map((t) => [t.tag, t.buildId])).to.deep.equal([
      ['default', kept.tags['e2b/tpl_build']],
    ]);
    // the template still gives its sandboxes its environment after the restart
    const s = await Sandbox.create('py-app', opts());
    made.push(s);
    expect((await s.commands.run('echo $GREETING')).stdout).to.equal('again\n');
  });
});
