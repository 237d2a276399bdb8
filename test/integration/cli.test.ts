import { expect } from 'chai';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { gzipSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { GuestNetwork } from '../../src/ports/guest-network.js';
import { Hypervisor } from '../../src/ports/hypervisor.js';
import type { InMemoryHypervisor } from '../../src/adapters/hypervisor/fake/in-memory-hypervisor.js';
import type { InMemoryGuestNetwork } from '../../src/adapters/guest-net/in-memory-guest-network.js';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { expectShellFollowsResize, inTerminal, runSvc, SHELL_SIZE, SVC, type CliRun } from '../helpers/svc-cli.js';
import { poll } from '../helpers/wait.js';
import { freePort } from '../../src/adapters/hypervisor/free-port.js';

const run = promisify(execFile);

describe('svc CLI as a subprocess against a real daemon', function () {
  this.timeout(60000);
  let d: TestDaemon;
  let env: NodeJS.ProcessEnv;
  const svc = (args: string[], input?: string, extraEnv: NodeJS.ProcessEnv = {}): Promise<CliRun> =>
    runSvc({ ...env, ...extraEnv }, args, input);

  before(async () => {
    const dir = tempDir();
    d = await startTestDaemon(
      { fake_agent: true, import_dirs: [tmpdir()], mount_dirs: [join(dir, 'shares')] },
      {},
      dir,
    );
    env = { PATH: process.env.PATH, HOME: d.dir, SVC_SOCKET: d.config.socket, SVC_TOKEN: 'test-token' };
  });
  after(async () => d.stop());

  it('creates with progress lines, lists with --json and as a table', async () => {
    // a free port: a fixed one may be taken by a VM of the developer's own
    const port = await freePort();
    const r = await svc(['new', 'c1', '-p', '--tag', 'team=a', '-P', `${port}:80`, '--cpus', '2']);
    expect(r.code, r.stderr).to.equal(0);
    expect(
      r.stderr
        .split('\n')
        .filter(Boolean)
        .map((l) => l.split(/\s+/)[0]),
    ).to.deep.equal(['accepted', 'disk', 'boot', 'wait_agent', 'ready']);
    expect(r.stdout).to.match(/^NAME\s+STATUS/);
    const j = await svc(['ls', '--json']);
    const list = JSON.parse(j.stdout);
    expect(list[0]).to.include({ name: 'c1', status: 'running', cpus: 2, persistent: true });
    expect(list[0].tags).to.deep.equal({ team: 'a' });
    expect(list[0].forwards[0]).to.include({ host_port: port, guest_port: 80 });
    expect((await svc(['get', 'c1', '--json'])).stdout).to.contain('"name": "c1"');
    // get shows every field, a line each (ls is the one-line table).
    const got = (await svc(['get', 'c1'])).stdout;
    expect(got).to.match(/^name +c1$/m);
    expect(got).to.match(new RegExp(`^forwards +127\\.0\\.0\\.1:${port} -> 80/tcp$`, 'm'));
    expect(got).to.match(/^tags +team=a$/m);
    expect(got).to.match(/^egress +allow/m);
    expect(got).to.match(/^memory +\d+ MB$/m);
    expect(got).to.match(/^expires +never$/m);
    // A lifetime: set, shown, taken away.
    expect((await svc(['ttl', 'c1', '2h', '--on-expire', 'suspend'])).stdout).to.match(
      /^vm c1 ends \d{4}-\d\d-\d\dT[\d:.]+Z, then suspend\n$/,
    );
    expect((await svc(['get', 'c1'])).stdout).to.match(/^expires +\S+Z, then suspend \(svc ttl c1 none: never\)$/m);
    expect((await svc(['ttl', 'c1', 'none'])).stdout).to.equal('vm c1 lives until deleted\n');
    // as a user might say it too
    expect((await svc(['ttl', 'c1', '1h'])).code).to.equal(0);
    expect((await svc(['ttl', 'c1', 'never'])).stdout).to.equal('vm c1 lives until deleted\n');
    const bad = await svc(['ttl', 'c1', 'soon']);
    expect(bad.code).to.equal(1);
    expect(bad.stderr).to.equal(
      'svc: ttl must be whole seconds or a duration such as 30m, from 1s to 24 days, got "soon"\n',
    );
  });

  it('follows VM changes with svc events until interrupted', async () => {
    const p = spawn(process.execPath, [SVC, 'events'], { env });
    let out = '';
    p.stdout.on('data', (c) => (out += c));
    const until = async (re: RegExp) => {
      await poll(() => re.test(out), { ms: 15_000 });
      expect(out).to.match(re);
    };
    await until(/^c1 running$/m);
    expect((await d.call('POST', '/vms', { name: 'ev-cli' })).status).to.equal(201);
    await until(/^ev-cli creating$/m);
    await until(/^ev-cli running$/m);
    expect((await d.call('DELETE', '/vms/ev-cli')).status).to.equal(200);
    await until(/^ev-cli removed$/m);
    p.kill('SIGINT');
    expect(await new Promise((r) => p.on('close', r))).to.equal(0);
  });

  it('imports an image from a relative path, with progress or --json, and says why an import is refused', async () => {
    const cwd = join(d.dir, 'imports');
    mkdirSync(cwd);
    const mbr = Buffer.alloc(1024);
    mbr[510] = 0x55;
    mbr[511] = 0xaa;
    writeFileSync(join(cwd, 'cloud.raw'), mbr);
    writeFileSync(join(cwd, 'notes.txt'), 'not a disk\n'.repeat(200));
    const run = (args: string[]) =>
      new Promise<CliRun>((resolve) => {
        const p = spawn(process.execPath, [SVC, ...args], { env, cwd });
        let stdout = '';
        let stderr = '';
        p.stdout.on('data', (c) => (stdout += c));
        p.stderr.on('data', (c) => (stderr += c));
        p.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
      });
    const r = await run(['image', 'import', 'cloud1', 'disk:cloud.raw', '--ssh-user', 'debian']);
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stderr).to.match(/^accepted .*disk:\/.*\/imports\/cloud\.raw/m);
    expect(r.stderr).to.match(/^import /m);
    expect(r.stdout.trim()).to.equal('image cloud1 imported');
    const j = await run(['image', 'import', 'cloud2', 'disk:./cloud.raw', '--json']);
    expect(JSON.parse(j.stdout)).to.include({ id: 'cloud2', agent_ready: false, ssh_user: 'root' });
    const bad = await run(['image', 'import', 'cloud3', 'disk:notes.txt']);
    expect(bad.code).to.not.equal(0);
    expect(bad.stderr).to.match(/neither a qcow2 nor a raw disk/);
    // the same disk from its URL (plain HTTP on loopback: the digest vouches for it)
    const served: Record<string, Buffer> = { '/cloud.raw': mbr, '/cloud.raw.gz': gzipSync(mbr) };
    const server = createServer((req, res) => {
      const body = served[req.url ?? ''];
      return body ? res.end(body) : res.writeHead(404).end('no such disk');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/cloud.raw`;
    try {
      const digest = `sha256:${createHash('sha256').update(mbr).digest('hex')}`;
      const u = await run(['image', 'import', 'cloud-url', url, '--digest', digest, '--ssh-user', 'debian', '--json']);
      expect(u.code, u.stderr).to.equal(0);
      expect(JSON.parse(u.stdout)).to.include({ id: 'cloud-url', agent_ready: false, ssh_user: 'debian' });
      const gz = `sha256:${createHash('sha256').update(served['/cloud.raw.gz']).digest('hex')}`;
      const packed = await run(['image', 'import', 'cloud-gz', `${url}.gz`, '--digest', gz, '--json']);
      expect(packed.code, packed.stderr).to.equal(0);
      expect(JSON.parse(packed.stdout)).to.include({ id: 'cloud-gz', agent_ready: false });
      // Debian's and GCE's way: disk.raw in a compressed tar
      const tarDir = tempDir('svc-cli-tar-');
      writeFileSync(join(tarDir, 'disk.raw'), mbr);
      execFileSync('tar', ['-cJf', join(tarDir, 'cloud.tar.xz'), '-C', tarDir, 'disk.raw']);
      served['/cloud.tar.xz'] = readFileSync(join(tarDir, 'cloud.tar.xz'));
      const txz = `sha256:${createHash('sha256').update(served['/cloud.tar.xz']).digest('hex')}`;
      const tarred = await run(['image', 'import', 'cloud-tar', url.replace('.raw', '.tar.xz'), '--digest', txz]);
      expect(tarred.code, tarred.stderr).to.equal(0);
      expect((await d.call('GET', '/images/cloud-tar')).json).to.include({ id: 'cloud-tar', agent_ready: false });
      const wrong = await run(['image', 'import', 'cloud-bad', url, '--digest', `sha256:${'0'.repeat(64)}`]);
      expect(wrong.code).to.not.equal(0);
      expect(wrong.stderr).to.include(`from: ${url}: its sha256 is ${digest.slice(7)}, not the digest given`);
      const plain = await run(['image', 'import', 'cloud-bad', url]);
      expect(plain.stderr).to.match(/is plain HTTP; give the image's digest/);
      const missing = await run(['image', 'import', 'cloud-bad', url.replace('cloud', 'gone'), '--digest', digest]);
      expect(missing.stderr).to.match(/answered 404 Not Found/);
      expect((await d.call('GET', '/images/cloud-bad')).status, 'a refused import leaves no image').to.equal(404);
    } finally {
      server.close();
    }
    const c = await svc(['new', 'cl', '--image', 'cloud1']);
    expect(c.code, c.stderr).to.equal(0);
    const x = await svc(['x', 'cl', '--', 'true']);
    expect(x.stderr).to.match(/deploy it with .*svc agent deploy cl/);
    const dep = await svc(['agent', 'deploy', 'cl']);
    expect(dep.code, dep.stderr).to.equal(0);
    expect(dep.stdout).to.match(/^agent \S+ runs in vm cl/);
    expect((await svc(['x', 'cl', '--', 'true'])).code).to.equal(0);
    expect((await svc(['rm', 'cl'])).code).to.equal(0);
  });

  it('builds an image from a recipe file (-f), its flags after it, and names a bad one’s mistake', async () => {
    // The local agents' "guest" is this host: the recipe writes and runs only in this test's folder
    // (no packages, no env: those would be apt-get and /etc/environment here).
    const dir = join(d.dir, 'recipe');
    const out = join(dir, 'out');
    mkdirSync(out, { recursive: true });
    writeFileSync(join(dir, 'motd.txt'), 'from a local file\n');
    const recipe = join(dir, 'recipe.yaml');
    writeFileSync(
      recipe,
      [
        'from: debian',
        'description: made from a file',
        'files:',
        `  - path: ${out}/motd`,
        '    source: ./motd.txt',
        '    mode: "0640"',
        `  - path: ${out}/inline`,
        '    content: "inline text\\n"',
        'run:',
        `  - test -s ${out}/motd`,
      ].join('\n'),
    );
    const r = await svc(['image', 'build', 'fromfile', '-f', recipe, '--run', `cat ${out}/inline > ${out}/copied`]);
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stderr).to.match(/^files .*\/out\/inline/m);
    expect(r.stdout.trim()).to.equal('image fromfile built');
    expect(readFileSync(join(out, 'motd'), 'utf8')).to.equal('from a local file\n');
    expect(statSync(join(out, 'motd')).mode & 0o777).to.equal(0o640);
    // the files were written before the recipe's lines ran, and the flag's line after them
    expect(readFileSync(join(out, 'copied'), 'utf8')).to.equal('inline text\n');
    expect((await d.call('GET', '/images/fromfile')).json).to.include({ description: 'made from a file' });
    const bad = async (text: string, want: RegExp, args: string[] = []) => {
      writeFileSync(recipe, text);
      const b = await svc(['image', 'build', 'bad', '-f', recipe, ...args]);
      expect(b.code, b.stderr).to.not.equal(0);
      expect(b.stderr).to.match(want);
    };
    await bad('from: debian\npackage: [jq]\n', /recipe\.yaml: unknown field "package" \(fields: from, packages/);
    await bad(
      `from: debian\nfiles:\n  - {path: ${out}/m, content: x, mode: 0640}\n`,
      /files\[0\]\.mode: write it quoted, as an octal string such as "0640"/,
    );
    await bad(
      `from: debian\nfiles:\n  - {path: ${out}/m, source: ./gone}\n`,
      /files\[0\]\.source: .*gone is not a file/,
    );
    await bad('run: [true]\n', /give the base image: --from IMAGE, or from: in a recipe file/);
    await bad('from: debian\n', /--env =x: |--env takes NAME=VALUE or NAME/, ['--env', '=x']);
    expect((await d.call('GET', '/images/bad')).status, 'nothing was built').to.equal(404);
  });

  it('says what a tag in a registry is now (svc image resolve), with a login from the environment', async () => {
    const r = await svc(['image', 'resolve', 'python:3.12']);
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stdout).to.match(/^docker:\/\/docker\.io\/library\/python:3\.12 sha256:[a-f0-9]{64}\n$/);
    const j = await svc(['image', 'resolve', 'docker://python:3.12', '--json']);
    expect(JSON.parse(j.stdout)).to.deep.equal({
      from: 'docker://docker.io/library/python:3.12',
      digest: r.stdout.trim().split(' ')[1],
    });
    const hv = d.daemon.container.get<InMemoryHypervisor>(Hypervisor);
    hv.registryLogin = { username: 'me', password: 'pw-9' };
    try {
      const none = await svc(['image', 'resolve', 'python:3.12']);
      expect(none.code).to.equal(1);
      expect(none.stderr).to.match(/unauthorized: authentication required/);
      const noPassword = await svc(['image', 'resolve', 'python:3.12', '--registry-user', 'me']);
      expect(noPassword.stderr).to.equal('svc: --registry-user: set SVC_REGISTRY_PASSWORD to the password\n');
      const login = await svc(['image', 'resolve', 'python:3.12', '--registry-user', 'me'], undefined, {
        SVC_REGISTRY_PASSWORD: 'pw-9',
      });
      expect(login.stdout, login.stderr).to.equal(r.stdout);
    } finally {
      hv.registryLogin = undefined;
    }
    const bad = await svc(['image', 'resolve', 'Not A Reference']);
    expect(bad.code).to.equal(1);
    expect(bad.stderr).to.match(/^svc: .*not a registry reference/);
  });

  it('runs commands with their exit code and piped stdin', async () => {
    const r = await svc(['x', 'c1', '--', 'sh', '-c', 'echo out; echo err >&2; exit 5']);
    expect(r).to.deep.equal({ code: 5, stdout: 'out\n', stderr: 'err\n' });
    const cat = await svc(['x', 'c1', '--', 'tr', 'a-z', 'A-Z'], 'piped in\n');
    expect(cat.stdout).to.equal('PIPED IN\n');
    expect(cat.code).to.equal(0);
    // no -- needed: the command's flags are its own (-e here is sh's, not svc x's --env)
    const flags = await svc(['x', 'c1', 'sh', '-e', '-c', 'echo "$0 $1"', 'a', '-t']);
    expect(flags).to.deep.equal({ code: 0, stdout: 'a -t\n', stderr: '' });
    // a reader that goes away ends svc quietly, with SIGPIPE's status, as it ends seq in a pipe
    const piped = await run(
      'bash',
      [
        '-c',
        '"$1" "$2" x c1 -- seq 1 1000000 | head -1; echo "status ${PIPESTATUS[0]}"',
        'bash',
        process.execPath,
        SVC,
      ],
      { env, encoding: 'utf8' },
    );
    expect(piped.stderr + piped.stdout).to.equal('1\nstatus 141\n');
    // a stdin that stays open and quiet (a parent that never writes): the command runs at once and
    // svc ends with it (it waited for the first byte of stdin to send the request, and for its end)
    const quiet = spawn(process.execPath, [SVC, 'x', 'c1', '--', 'echo', 'hi'], { env });
    let said = '';
    quiet.stdout.on('data', (c) => (said += c));
    const ended = await new Promise<number | null>((res) => quiet.on('close', res));
    expect({ ended, said }).to.deep.equal({ ended: 0, said: 'hi\n' });
    quiet.stdin.destroy();
  });

  it('copies files and directories both ways', async () => {
    const root = join(d.config.data_dir, 'vms', 'c1', 'guest');
    const local = join(d.dir, 'tree');
    mkdirSync(join(local, 'sub'), { recursive: true });
    writeFileSync(join(local, 'sub', 'f.txt'), 'tree file');
    writeFileSync(join(d.dir, 'one.txt'), 'one file');
    expect((await svc(['cp', local, `c1:${root}/tree`])).code).to.equal(0);
    expect((await svc(['cp', join(d.dir, 'one.txt'), `c1:${root}/one.txt`])).code).to.equal(0);
    expect(readFileSync(join(root, 'tree', 'sub', 'f.txt'), 'utf8')).to.equal('tree file');
    expect((await svc(['cp', `c1:${root}/tree`, join(d.dir, 'back')])).code).to.equal(0);
    expect(readFileSync(join(d.dir, 'back', 'sub', 'f.txt'), 'utf8')).to.equal('tree file');
    expect((await svc(['cp', `c1:${root}/one.txt`, join(d.dir, 'one-back.txt')])).code).to.equal(0);
    expect(readFileSync(join(d.dir, 'one-back.txt'), 'utf8')).to.equal('one file');
    const ls = JSON.parse((await svc(['fs', 'ls', 'c1', `${root}/tree`, '--json'])).stdout);
    expect(ls.map((e: { name: string }) => e.name)).to.deep.equal(['sub']);
    // Into a directory that is there, under the source's own name (cp -r, docker cp); /. for contents.
    expect((await svc(['cp', join(d.dir, 'one.txt'), `c1:${root}/tree`])).code).to.equal(0);
    expect(readFileSync(join(root, 'tree', 'one.txt'), 'utf8')).to.equal('one file');
    expect((await svc(['cp', `c1:${root}/tree`, join(d.dir, 'back')])).code).to.equal(0);
    expect(readFileSync(join(d.dir, 'back', 'tree', 'one.txt'), 'utf8')).to.equal('one file');
    expect((await svc(['cp', `c1:${root}/tree/.`, join(d.dir, 'back')])).code).to.equal(0);
    expect(readFileSync(join(d.dir, 'back', 'one.txt'), 'utf8')).to.equal('one file');
    expect((await svc(['cp', local, `c1:${root}/one.txt`])).stderr).to.match(/one\.txt: not a directory/);
    expect((await svc(['cp', 'a', 'b'])).stderr).to.match(/exactly one/);
    // --user: what lands is that user's, the folders made on the way too (chown: as root, as CI runs)
    if (process.getuid?.() === 0) {
      expect((await svc(['cp', '-u', 'nobody', local, `c1:${root}/nb/tree`])).code).to.equal(0);
      for (const p of ['nb', 'nb/tree', 'nb/tree/sub/f.txt']) expect(statSync(join(root, p)).uid, p).to.equal(65534);
      // and out here it is this user's, not the guest's owner (as docker cp)
      expect((await svc(['cp', `c1:${root}/nb`, join(d.dir, 'nb-back')])).code).to.equal(0);
      expect(statSync(join(d.dir, 'nb-back', 'tree', 'sub', 'f.txt')).uid).to.equal(0);
    }
    expect((await svc(['cp', '-u', 'no-such-user', local, `c1:${root}/x`])).stderr).to.match(
      /cp --user no-such-user: no user no-such-user/,
    );
    // - is a tar archive on stdout or stdin, as docker cp takes it: a directory under its own name,
    // DIR/. its contents, a file its one entry; from stdin, extracted into a directory
    // (a shell's pipe, run without blocking: the daemon answers from this process)
    const sh = async (script: string, ...args: string[]) =>
      (await run('sh', ['-c', script, 'sh', process.execPath, SVC, ...args], { env, encoding: 'utf8' })).stdout;
    const listed = async (src: string) =>
      (await sh('"$1" "$2" cp "$3" - | tar -t', src)).split('\n').filter(Boolean).sort();
    expect(await listed(`c1:${root}/tree`)).to.deep.equal(['tree', 'tree/one.txt', 'tree/sub', 'tree/sub/f.txt']);
    expect(await listed(`c1:${root}/tree/.`)).to.deep.equal(['one.txt', 'sub', 'sub/f.txt']);
    expect(await sh('"$1" "$2" cp "$3" - | tar -xO', `c1:${root}/tree/one.txt`)).to.equal('one file');
    await sh('tar -C "$3" -c . | "$1" "$2" cp - "$4"', local, `c1:${root}/from-tar`);
    expect(readFileSync(join(root, 'from-tar', 'sub', 'f.txt'), 'utf8')).to.equal('tree file');
    expect((await svc(['cp', '-', `c1:${root}/one.txt`], '')).stderr).to.match(/one\.txt: not a directory/);
    expect(existsSync(join(d.dir, '-')), 'no file named -').to.equal(false);
    // a folder with things in it goes with -r, which its refusal names (the API's words are recursive=true)
    const full = await svc(['fs', 'rm', 'c1', `${root}/tree`]);
    expect(full).to.deep.include({ code: 1 });
    expect(full.stderr).to.match(/tree: directory not empty \(svc fs rm -r removes it/);
    expect((await svc(['fs', 'rm', '-r', 'c1', `${root}/tree`])).code).to.equal(0);
    expect(existsSync(join(root, 'tree'))).to.equal(false);
  });

  it('manages secrets from stdin (never argv), forwards and shows history, activity, info and logs', async () => {
    expect((await svc(['secret', 'set', 'TOK'], 'from-stdin')).stdout).to.match(/secret TOK set \(10 bytes/);
    const inj = JSON.parse((await svc(['secret', 'inject', 'c1', 'TOK', '--json'])).stdout);
    expect(readFileSync(inj.path, 'utf8')).to.equal('from-stdin');
    const f = JSON.parse((await svc(['fwd', 'add', 'c1', '22', '--json'])).stdout);
    expect((await svc(['fwd', 'ls', 'c1'])).stdout).to.contain(String(f.host_port));
    expect((await svc(['fwd', 'rm', 'c1', String(f.host_port)])).code).to.equal(0);
    // stdin and stdout to a port in the VM (a local agent's loopback is this host's): one HTTP exchange.
    const app = createServer((req, res) => res.end(`hello ${req.url}`));
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
    try {
      const port = (app.address() as AddressInfo).port;
      const ex = await svc(
        ['fwd', 'stdio', 'c1', String(port)],
        'GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n',
      );
      expect(ex.code, ex.stderr).to.equal(0);
      expect(ex.stdout).to.match(/^HTTP\/1\.1 200 OK\r\n[\s\S]*\r\n\r\nhello \/x$/);
      const closed = await svc(['fwd', 'stdio', 'c1', '1'], '');
      expect(closed.code).to.equal(1);
      expect(closed.stderr).to.match(/nothing listens on port 1/);
    } finally {
      app.close();
    }
    expect((await svc(['metrics', 'c1'])).stdout).to.match(/samples|no samples/);
    expect(JSON.parse((await svc(['activity', '--json'])).stdout)[0]).to.have.keys(
      'id',
      't',
      'action',
      'target',
      'status',
      'duration_ms',
    );
    expect(JSON.parse((await svc(['info', '--json'])).stdout).hypervisor).to.equal('fake');
    expect((await svc(['logs', 'c1'])).stdout).to.contain('[fake] c1 booted');
    // an empty console (a guest restored from a snapshot has printed nothing yet) is said, on stderr
    const serial = join(d.config.data_dir, 'vms', 'c1', 'serial.log');
    const kept = readFileSync(serial);
    writeFileSync(serial, '');
    expect(await svc(['logs', 'c1'])).to.deep.include({ code: 0, stdout: '' });
    expect((await svc(['logs', 'c1'])).stderr).to.match(/vm c1's console log is empty/);
    expect((await svc(['logs', '-n', '5', 'c1'])).stderr).to.match(/vm c1's console log is empty/);
    // -n: the console's last lines, as tail -n (a log longer than the first window read back included)
    const long = Array.from({ length: 5000 }, (_, i) => `line ${i} ${'x'.repeat(40)}`).join('\n') + '\n';
    writeFileSync(serial, long);
    expect((await svc(['logs', '-n', '2', 'c1'])).stdout).to.equal(long.split('\n').slice(-3).join('\n'));
    expect((await svc(['logs', '-n', '4000', 'c1'])).stdout).to.equal(long.split('\n').slice(-4001).join('\n'));
    expect((await svc(['logs', '-n', '9999', 'c1'])).stdout).to.equal(long);
    expect((await svc(['logs', '-n', '0', 'c1'])).stdout).to.equal('');
    expect((await svc(['logs', '-n', '2', '--tail', '9', 'c1'])).stderr).to.match(/one of --tail, -n and --from/);
    // --from: from a byte of the log (what an earlier read ended at)
    expect((await svc(['logs', '--from', String(long.length - 12), 'c1'])).stdout).to.equal(long.slice(-12));
    expect((await svc(['logs', '--from', '1x', 'c1'])).stderr).to.match(/console log takes a byte/);
    // -n with -f: the follow goes on from the byte after the last lines, nothing shown twice
    const follower = spawn(process.execPath, [SVC, 'logs', '-n', '1', '-f', 'c1'], { env });
    let fout = '';
    follower.stdout.on('data', (c) => (fout += c));
    const lastLine = long.split('\n').at(-2) + '\n';
    await poll(() => fout === lastLine, { ms: 15_000, every: 50 });
    appendFileSync(serial, 'after 1\nafter 2\n');
    await poll(() => fout.includes('after 2'), { ms: 15_000, every: 50 });
    follower.kill('SIGINT');
    expect(fout).to.equal(lastLine + 'after 1\nafter 2\n');
    writeFileSync(serial, kept);
    const bash = (await svc(['completion', 'bash'])).stdout;
    expect(bash).to.contain('complete -F _svc svc');
    // Every command is completed (read from the program), and a VM's name after those that take one.
    const [all, vms] = [...bash.matchAll(/"([a-z -]+)"|" ([a-z -]+) "/g)].map((m) => (m[1] ?? m[2]).split(' '));
    expect(all).to.include.members(['edit', 'ttl', 'run', 'ps', 'logs', 'nodes', 'exec', 'ssh', 'ssh-config']);
    expect(vms).to.include.members([
      'edit',
      'get',
      'x',
      'exec',
      'logs',
      'ps',
      'kill',
      'move',
      'fork',
      'clone',
      'ssh-config',
    ]);
    expect(vms).to.not.include.members(['new', 'ls', 'nodes']);
    expect((await svc(['completion', 'zsh'])).stdout).to.contain('compdef _svc svc');
  });

  it('drives an interactive shell through a pseudo-terminal, with resize and the exit code', async () => {
    const term = inTerminal(SVC, ['sh', 'c1', '--shell', '/bin/sh'], env, SHELL_SIZE);
    await expectShellFollowsResize(term, 500);
    term.write('exit 6\r');
    expect(await term.exit).to.equal(6);
    // --cwd and -e, at a terminal and piped
    const there = inTerminal(SVC, ['sh', 'c1', '--shell', '/bin/sh', '--cwd', '/tmp', '-e', 'A=x y'], env);
    there.write('echo "at:$(pwd):$A"; exit 2\r');
    await there.waitFor(/at:\/tmp:x y/);
    expect(await there.exit).to.equal(2);
    const piped = await svc(['sh', 'c1', '--cwd', '/tmp', '-e', 'A=x y'], 'echo "at:$(pwd):$A"\n');
    expect(piped).to.deep.include({ code: 0, stdout: 'at:/tmp:x y\n' });
    // -w is docker exec's name for it, on svc x too
    expect(await svc(['x', 'c1', '-w', '/tmp', 'pwd'])).to.deep.include({ code: 0, stdout: '/tmp\n' });
  });

  it('runs svc x in a terminal when it is at one (a command that reads it, its code), apart with -T, in one with -t', async () => {
    const reader = 'test -t 0 && printf "tty> "; read -r line; echo "got $line"; exit 4';
    const term = inTerminal(SVC, ['x', 'c1', '--', 'sh', '-c', reader], env);
    await term.waitFor(/tty> /);
    term.write('hello\r');
    await term.waitFor(/got hello/);
    expect(await term.exit).to.equal(4);
    const apart = inTerminal(
      SVC,
      ['x', '-T', 'c1', '--', 'sh', '-c', 'test -t 0 || printf "no terminal"; exit 2'],
      env,
    );
    await apart.waitFor(/no terminal/);
    expect(await apart.exit).to.equal(2);
    // -t with pipes (as ssh -t): a terminal all the same, its output with the terminal's line ends
    const forced = await svc(['x', '-t', '-e', 'A=1', 'c1', '--', 'sh', '-c', 'test -t 1 && echo "terminal $A"']);
    expect(forced).to.deep.include({ code: 0, stdout: 'terminal 1\r\n' });
    const refused = await svc(['x', '-t', '--timeout', '5s', 'c1', '--', 'true']);
    expect(refused.code).to.equal(1);
    expect(refused.stderr).to.match(/-t takes no --timeout, --uid or --gid/);
    const missing = await svc(['x', '-t', 'c1', '--', 'no-such-command-svc']);
    expect(missing.code, 'as an exec of it, and a shell').to.equal(127);
    expect(missing.stderr).to.match(/no command no-such-command-svc in the guest's PATH/);
  });

  it('runs durable processes: run --detach, ps, logs -f from an offset, run in the foreground, attach with a terminal, kill, watch', async () => {
    const started = await svc([
      'run',
      '--detach',
      '--tag',
      'cli-job',
      'c1',
      '--',
      'sh',
      '-c',
      'echo one; echo two >&2; sleep 0.3; echo three; exit 3',
    ]);
    expect(started.code, started.stderr).to.equal(0);
    const id = started.stdout.trim();
    expect(id).to.match(/^p\d+$/);
    const logs = await svc(['logs', '-f', 'c1', 'cli-job']);
    expect(logs.code).to.equal(3);
    expect(logs.stdout).to.equal('one\nthree\n');
    expect(logs.stderr).to.equal('two\n');
    expect((await svc(['logs', '--from', 'stdout:4', 'c1', id])).stdout).to.equal('three\n');
    // -n: the last lines of each stream, as tail -n counts them
    expect(await svc(['logs', '-n', '1', 'c1', id])).to.deep.include({ code: 3, stdout: 'three\n', stderr: 'two\n' });
    expect((await svc(['logs', '--lines', '0', 'c1', id])).stdout).to.equal('');
    expect((await svc(['logs', '--tail', '5', 'c1', id])).stderr).to.match(/-n LINES/);
    expect((await svc(['logs', '--from', 'stdout:4', 'c1'])).stderr).to.match(/svc logs NAME ID/);
    const ps = await svc(['ps', 'c1']);
    expect(ps.stdout).to.match(new RegExp(`${id}\\s+cli-job\\s+\\d+\\s+exited 3`));
    // --restart in docker's words: started again once, then ended; logs has both runs.
    const again = await svc(['run', '-d', '--restart', 'on-failure:1', 'c1', '--', 'sh', '-c', 'echo run; exit 5']);
    expect(again.code, again.stderr).to.equal(0);
    const twice = await svc(['logs', '-f', 'c1', again.stdout.trim()]);
    expect(twice).to.deep.include({ code: 5, stdout: 'run\nrun\n' });
    expect((await svc(['run', '-d', '--restart', 'sometimes', 'c1', '--', 'true'])).stderr).to.match(
      /--restart must be/,
    );
    // In the foreground: the output as it comes and the exit code; stdin passed on with -i.
    const fg = await svc(['run', '-i', 'c1', '--', 'sh', '-c', 'cat; exit 4'], 'piped in\n');
    expect(fg).to.deep.include({ code: 4, stdout: 'piped in\n' });
    // attach: a terminal's keys to a running process with a pty, its output back, Ctrl-] leaves it running.
    const tty = await svc([
      'run',
      '--detach',
      '-t',
      '-i',
      '--tag',
      'tty-job',
      'c1',
      '--',
      'sh',
      '-c',
      'while read l; do echo "got $l"; done',
    ]);
    expect(tty.code, tty.stderr).to.equal(0);
    const term = inTerminal(SVC, ['attach', 'c1', 'tty-job'], env);
    await new Promise((r) => setTimeout(r, 800));
    term.write('hello\r');
    await term.waitFor(/got hello/, 15_000);
    term.write('\x1d');
    expect(await term.exit).to.equal(0);
    expect(
      JSON.parse((await svc(['ps', 'c1', '--json'])).stdout).find(
        (p: { tag?: string; state: string }) => p.tag === 'tty-job' && p.state === 'running',
      ),
    ).to.not.equal(undefined);
    expect((await svc(['kill', 'c1', 'tty-job', '-s', 'KILL'])).code).to.equal(0);
    const gone = await svc(['kill', '--forget', 'c1', 'tty-job']);
    expect(gone.stdout).to.match(/removed/);
    // watch: events as lines, resumable with --from
    const dir = join(d.dir, 'watched');
    mkdirSync(dir);
    const w = spawn(process.execPath, [SVC, 'watch', '--json', 'c1', dir], { env });
    let wout = '';
    w.stdout.on('data', (c) => (wout += c));
    await poll(() => wout.includes('watching'), { ms: 15_000, every: 100 });
    writeFileSync(join(dir, 'f'), 'x');
    await poll(() => wout.includes('"write"'), { ms: 15_000, every: 100 });
    w.kill('SIGINT');
    const events = wout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(events.map((e: { type: string }) => e.type)).to.deep.equal(['watching', 'create', 'write']);
    expect(events[2].path).to.equal(join(dir, 'f'));
  });

  it('clones a suspended VM and shows the pool', async () => {
    expect((await svc(['new', 'tpl', '-p'])).code).to.equal(0);
    expect((await svc(['suspend', 'tpl'])).code).to.equal(0);
    const c = JSON.parse((await svc(['clone', 'tpl', 'cl1', '--json'])).stdout);
    expect(c).to.include({ name: 'cl1', from: 'tpl', status: 'running' });
    expect(JSON.parse((await svc(['new', 'cl2', '--from', 'tpl', '--json'])).stdout).from).to.equal('tpl');
    // A clone takes host folders of its own (the fake guest's mount script does nothing here).
    const shared = join(d.dir, 'shares', 'one');
    mkdirSync(shared, { recursive: true });
    const m = await svc(['clone', 'tpl', 'cl3', '-m', `${shared}:/mnt/s:ro`, '--json']);
    expect(m.code, m.stderr).to.equal(0);
    expect(JSON.parse(m.stdout).mounts).to.deep.equal([
      { host: realpathSync(shared), guest: '/mnt/s', readonly: true },
    ]);
    expect((await svc(['clone', 'tpl', 'cl4', '-m', 'nocolon'])).stderr).to.match(
      /--mount nocolon: use host:guest\[:ro\]/,
    );
    expect((await svc(['rm', 'cl3'])).code).to.equal(0);
    expect((await svc(['pool'])).stdout).to.match(/^no warm pool configured \(warm_pool: /);
    // the lifecycle verbs take several names too, --json an array of them
    const paused = await svc(['pause', 'cl1', 'cl2', '--json']);
    expect(JSON.parse(paused.stdout), paused.stderr).to.have.length(2);
    for (const n of ['cl1', 'cl2']) expect((await d.call('GET', `/vms/${n}`)).json.status).to.equal('paused');
    expect(await svc(['resume', 'cl1', 'nope', 'cl2'])).to.deep.equal({
      code: 1,
      stdout: 'vm cl1 resumed\nvm cl2 resumed\n',
      stderr: 'svc: vm nope not found\n',
    });
    // several at once, as docker rm: one that is not there is said, the others still go, exit 1
    expect(await svc(['rm', 'cl1', 'nope', 'cl2'])).to.deep.equal({
      code: 1,
      stdout: 'vm cl1 deleted\nvm cl2 deleted\n',
      stderr: 'svc: vm nope not found\n',
    });
    expect((await svc(['rm', 'tpl'])).code).to.equal(0);
  });

  it('forks a running VM, naming the forks and how long the source was held', async () => {
    expect((await svc(['new', 'fsrc'])).code).to.equal(0);
    const out = await svc(['fork', 'fsrc', '-n', '2']);
    expect(out.code, out.stderr).to.equal(0);
    expect(out.stdout).to.match(/fsrc-fork-1 +running/);
    expect(out.stdout).to.match(/fsrc-fork-2 +running/);
    expect(out.stdout).to.match(/\(fsrc was held \d+ ms while it was captured\)\n$/);
    const named = JSON.parse(
      (await svc(['fork', 'fsrc', '--name', 'fa', 'fb', '--tag', 'task=t42', '--tag', 'try=1', '--json'])).stdout,
    );
    expect(named.vms.map((v: { name: string }) => v.name)).to.deep.equal(['fa', 'fb']);
    for (const v of named.vms) expect(v.tags).to.deep.equal({ task: 't42', try: '1' });
    const untagged = await svc(['fork', 'fsrc', '--tag', 'oops']);
    expect(untagged.code).to.equal(1);
    expect(untagged.stderr).to.match(/--tag.*oops|oops.*--tag/);
    const bad = await svc(['fork', 'fsrc', '-n', 'lots']);
    expect(bad.code).to.equal(1);
    expect(bad.stderr).to.match(/lots/);
    for (const n of ['fsrc-fork-1', 'fsrc-fork-2', 'fa', 'fb', 'fsrc']) expect((await svc(['rm', n])).code).to.equal(0);
  });

  it("sets, shows and logs a VM's egress policy, and creates with one", async () => {
    const made = await svc([
      'new',
      'eg1',
      '--egress-default',
      'deny',
      '--allow',
      'PyPI.org',
      '--allow',
      'host:8080',
      '--deny',
      '10.0.0.0/8:22',
      '--json',
    ]);
    expect(made.code, made.stderr).to.equal(0);
    expect(JSON.parse(made.stdout).egress).to.deep.equal({
      default: 'deny',
      allow: ['pypi.org', 'host:8080'],
      deny: ['10.0.0.0/8:22'],
    });
    expect((await svc(['egress', 'show', 'eg1'])).stdout).to.equal(
      'default deny\nallow   pypi.org\nallow   host:8080\ndeny    10.0.0.0/8:22\n',
    );
    const set = await svc(['egress', 'set', 'eg1', '--allow', '*.github.com']);
    expect(set.code, set.stderr).to.equal(0);
    expect(set.stdout).to.equal('default allow\nallow   *.github.com\n');
    expect((await svc(['egress', 'get', 'eg1'])).stdout, 'get: as show').to.equal(set.stdout);
    const bad = await svc(['egress', 'set', 'eg1', '--allow', 'a b']);
    expect(bad.code).to.equal(1);
    expect(bad.stderr).to.match(
      /^svc: egress.allow: egress rule "a b" is not a domain, an IP or CIDR, or host:PORT\n$/,
    );
    expect((await svc(['egress', 'set', 'eg1'])).stderr).to.match(/give --file, or --egress-default/);
    // A SOCKS5 proxy: its password by a host secret's name, shown as that name.
    const proxied = await svc([
      'egress',
      'set',
      'eg1',
      '--allow',
      '*.github.com',
      '--egress-proxy',
      'Socks.Example.com:1080',
      '--egress-proxy-user',
      'me',
      '--egress-proxy-secret',
      'socks-pw',
    ]);
    expect(proxied.code, proxied.stderr).to.equal(0);
    expect(proxied.stdout).to.equal(
      'default allow\nallow   *.github.com\nproxy   socks5://me@socks.example.com:1080 (password: secret socks-pw)\n',
    );
    expect((await d.call('GET', '/vms/eg1/egress')).json.proxy).to.deep.equal({
      address: 'socks.example.com:1080',
      username: 'me',
      secret: 'socks-pw',
    });
    const noUser = await svc(['egress', 'set', 'eg1', '--egress-proxy', 'p:1080', '--egress-proxy-secret', 'x']);
    expect(noUser.stderr).to.match(/egress.proxy.secret \(the password\) needs a username/);
    expect((await svc(['egress', 'set', 'eg1', '--egress-proxy-user', 'me'])).stderr).to.match(
      /--egress-proxy-user and --egress-proxy-secret go with --egress-proxy HOST:PORT/,
    );
    expect((await svc(['egress', 'set', 'eg1', '--allow', '*.github.com'])).code).to.equal(0);
    const net = d.daemon.container.get<InMemoryGuestNetwork>(GuestNetwork);
    net.emit({
      t: '2026-01-01T00:00:00.000Z',
      vm: 'eg1',
      event: 'close',
      proto: 'tcp',
      decision: 'allow',
      rule: '*.github.com',
      addr: '140.82.112.3',
      port: 443,
      name: 'api.github.com',
      bytes_out: 2048,
      bytes_in: 1 << 20,
    });
    const log = await svc(['egress', 'log', 'eg1']);
    expect(log.stdout).to.match(
      /close\s+allow\s+tcp\s+api\.github\.com \(140\.82\.112\.3:443\)\s+\*\.github\.com\s+2\.0 KiB out, 1\.0 MiB in/,
    );
    expect(JSON.parse((await svc(['egress', 'log', 'eg1', '--json'])).stdout)).to.include({
      rule: '*.github.com',
      bytes_in: 1 << 20,
    });
    expect((await svc(['rm', 'eg1'])).code).to.equal(0);
  });

  it('creates with an egress secret (svc create --egress-secret), shows and replaces the bindings', async () => {
    expect((await d.call('POST', '/secrets', { name: 'openai', value: 'sk-cli-never-shown' })).status).to.equal(200);
    const made = await svc(['create', 'eg2', '--egress-secret', 'openai=api.openai.com:OPENAI_API_KEY', '--json']);
    expect(made.code, made.stderr).to.equal(0);
    const [b] = JSON.parse(made.stdout).egress_secrets as { placeholder: string }[];
    expect(b).to.include({ secret: 'openai', env: 'OPENAI_API_KEY' });
    const shown = await svc(['egress', 'secrets', 'eg2']);
    expect(shown.stdout).to.match(
      /^SECRET +HOSTS +ENV +HEADER +PLACEHOLDER\nopenai +api\.openai\.com +OPENAI_API_KEY +any +svc-egress-/,
    );
    expect(shown.stdout).to.include(b.placeholder).and.not.include('sk-cli-never-shown');
    const set = await svc([
      'egress',
      'secrets',
      'eg2',
      '--set',
      '--egress-secret',
      'openai=*.openai.com,api.example.com',
      '--json',
    ]);
    expect(set.code, set.stderr).to.equal(0);
    expect(JSON.parse(set.stdout)[0])
      .to.include({ placeholder: b.placeholder })
      .and.deep.include({ hosts: ['*.openai.com', 'api.example.com'] });
    const bad = await svc(['create', 'eg3', '--egress-secret', 'openai']);
    expect(bad.code).to.equal(1);
    expect(bad.stderr).to.match(/--egress-secret openai: use SECRET=HOST/);
    const unknown = await svc(['create', 'eg3', '--egress-secret', 'nope=api.example.com']);
    expect(unknown.stderr).to.match(/there is no host secret nope/);
    const header = await svc([
      'egress',
      'secrets',
      'eg2',
      '--set',
      '--egress-header',
      'openai=api.openai.com:X-Api-Key',
    ]);
    expect(header.code, header.stderr).to.equal(0);
    expect(header.stdout).to.match(/\nopenai +api\.openai\.com +- +X-Api-Key \(always\) +svc-egress-/);
    const badHeader = await svc(['egress', 'secrets', 'eg2', '--set', '--egress-header', 'openai=api.openai.com']);
    expect(badHeader.stderr).to.match(/--egress-header openai=api.openai.com: use SECRET=HOST/);
    expect((await svc(['egress', 'secrets', 'eg2', '--set'])).stdout).to.equal('no egress secrets\n');
  });

  it('fails with one line on stderr and a non-zero exit; says how to start the daemon', async () => {
    const nf = await svc(['get', 'ghost']);
    expect(nf.code).to.equal(1);
    expect(nf.stderr).to.equal('svc: vm ghost not found\n');
    const down = await svc(['ls'], undefined, { SVC_SOCKET: join(d.dir, 'none.sock') });
    expect(down.code).to.equal(3);
    expect(down.stderr).to.match(/^svc: cannot reach svcd .* start it with: npm start/);
    const bad = await svc(['new', '--wait', 'never']);
    expect(bad.code).to.equal(1);
    const running = await svc(['edit', 'c1', '--cpus', '2']);
    expect(running).to.deep.include({ code: 1 });
    expect(running.stderr).to.match(/^svc: vm c1 is running: a VM's shape changes while it is stopped/);
    expect((await svc(['stop', 'c1'])).stdout).to.equal('vm c1 shut down\n');
    const was = (await d.call('GET', '/vms/c1')).json;
    const edited = await svc(['edit', 'c1', '--cpus', '2', '--disk', String(was.disk_gb + 1)]);
    expect(edited.stdout).to.equal(`vm c1: 2 vCPUs, ${was.memory_mb} MB, ${was.disk_gb + 1} GB disk\n`);
    expect((await svc(['edit', 'c1'])).stderr).to.match(/give --cpus, --memory or --disk/);
    expect((await svc(['rm', 'c1'])).stdout).to.equal('vm c1 deleted\n');
  });

  it('takes, lists, reverts to and deletes named snapshots (svc snapshot)', async () => {
    expect((await svc(['new', 'c10', '-p'])).code).to.equal(0);
    const took = await svc(['snapshot', 'create', 'c10', 'clean', '-d', 'fresh box']);
    expect(took.stdout).to.equal('snapshot clean of vm c10 taken (disk and memory)\n');
    const kid = await svc(['clone', 'c10', 'c11', '--snapshot', 'clean', '--json']);
    expect(kid.code, kid.stderr).to.equal(0);
    expect(JSON.parse(kid.stdout)).to.include({ name: 'c11', from: 'c10', status: 'running' });
    expect((await svc(['rm', 'c11'])).code).to.equal(0);
    // VM:SNAPSHOT names it too, as an image's tag is written: for clone and for new --from
    const tagged = await svc(['clone', 'c10:clean', 'c12', '--json']);
    expect(JSON.parse(tagged.stdout), tagged.stderr).to.include({ name: 'c12', from: 'c10', status: 'running' });
    const made = await svc(['new', 'c13', '--from', 'c10:clean']);
    expect(made.code, made.stderr).to.equal(0);
    expect((await svc(['rm', 'c12', 'c13'])).code).to.equal(0);
    expect((await svc(['clone', 'c10:nope', 'c14'])).stderr).to.equal('svc: vm c10 has no snapshot nope\n');
    expect((await svc(['clone', 'c10:clean', 'c14', '-s', 'other'])).stderr).to.match(/give one/);
    expect((await svc(['stop', 'c10'])).code).to.equal(0);
    expect((await svc(['snapshot', 'take', 'c10'])).stdout).to.equal('snapshot snap-1 of vm c10 taken (disk)\n');
    const ls = (await svc(['snapshot', 'ls', 'c10'])).stdout.split('\n');
    expect(ls[0]).to.match(/^NAME +TAKEN +HOLDS +FROM +SHAPE +DESCRIPTION$/);
    expect(ls[1]).to.match(/^clean +\d{4}-\d\d-\d\dT\S+Z +disk\+memory +running +\d+ cpu\/\d+ MB\/\d+ GB +fresh box$/);
    expect(ls[2]).to.match(/^snap-1 +\S+ +disk +stopped +/);
    expect(JSON.parse((await svc(['snapshot', 'ls', 'c10', '--json'])).stdout)).to.have.length(2);
    const back = await svc(['snapshot', 'revert', 'c10', 'clean']);
    expect(back.stdout, back.stderr).to.equal('vm c10 reverted to snapshot clean: running\n');
    expect((await d.call('GET', '/vms/c10')).json.status).to.equal('running');
    const missing = await svc(['snapshot', 'apply', 'c10', 'nope']);
    expect(missing).to.deep.include({ code: 1, stderr: 'svc: vm c10 has no snapshot nope\n' });
    expect((await svc(['snapshot', 'rm', 'c10', 'clean'])).stdout).to.equal('snapshot clean of vm c10 deleted\n');
    expect((await svc(['snapshot', 'delete', 'c10', 'snap-1'])).code).to.equal(0);
    expect((await svc(['snapshot', 'ls', 'c10'])).stdout).to.equal('vm c10 has no snapshots\n');
    expect((await svc(['rm', 'c10'])).code).to.equal(0);
  });

  it("runs piped input to svc sh as a script, no terminal (-t gives one): its own output, the shell's status", async () => {
    expect((await d.call('POST', '/vms', { name: 'c8', persistent: true })).status).to.equal(201);
    const r = await svc(['sh', 'c8', '--shell', '/bin/sh'], 'echo piped-$((40+2))\necho apart >&2\nexit 3\n');
    expect(r).to.deep.include({ code: 3, stdout: 'piped-42\n', stderr: 'apart\n' });
    // Without a last newline and without an exit: the end of input alone ends it.
    const eof = await svc(['sh', 'c8', '--shell', '/bin/sh'], 'echo no-exit-$((6*7))');
    expect(eof).to.deep.include({ code: 0, stdout: 'no-exit-42\n', stderr: '' });
    // No --shell: the shell a terminal gets; with --user, that user's login shell, in its home.
    const plain = await svc(['sh', 'c8'], '[ -t 0 ] || echo no-terminal');
    expect(plain).to.deep.include({ code: 0, stdout: 'no-terminal\n', stderr: '' });
    const root = readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('root:'))!
      .split(':');
    const login = await svc(['sh', 'c8', '--user', 'root'], 'echo "$0"; pwd; echo "$USER"');
    expect(login.stdout, login.stderr).to.equal(`${root[6]}\n${root[5]}\nroot\n`);
    // -t: a terminal as with ssh -tt; what was typed is echoed back, and the end of input ends it.
    const tty = await svc(['sh', 'c8', '--shell', '/bin/sh', '-t'], 'echo piped-$((40+2))\nexit 3\n');
    expect(tty.code, tty.stderr).to.equal(3);
    expect(tty.stdout).to.contain('piped-42').and.contain('echo piped-$((40+2))');
  });

  it('runs svc x as a user of the guest by name (--user): its ids, home and login shell', async () => {
    const root = readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('root:'))!
      .split(':');
    const r = await svc(['x', 'c8', '--user', 'root', '--', 'sh', '-c', 'id -u; id -g; pwd; echo "$SHELL"']);
    expect(r.stdout, r.stderr).to.equal(`0\n0\n${root[5]}\n${root[6]}\n`);
    const ghost = await svc(['x', 'c8', '--user', 'svc-no-such-user', '--', 'true']);
    expect(ghost).to.deep.include({ code: 127, stderr: 'svc: no user svc-no-such-user in the guest\n' });
    const bad = await svc(['x', 'c8', '--user', 'a;b', '--', 'true']);
    expect(bad.code).to.equal(1);
    expect(bad.stderr).to.equal('svc: user must be a user name or number, got "a;b"\n');
    const both = await svc(['x', 'c8', '--user', 'root', '--uid', '0', '--', 'true']);
    expect(both.stderr).to.equal('svc: give user or uid, not both\n');
  });

  it('answers a usage mistake in one line and a hint, naming the flag and what was typed', async () => {
    const disk = await svc(['new', 'x1', '--disk', 'abc']);
    expect(disk.code).to.equal(1);
    expect(disk.stderr).to.equal(
      "error: option '--disk <gb>' argument 'abc' is invalid. expected a whole number of GB, such as 10 or 20G\n(see: svc new --help)\n",
    );
    const unknown = await svc(['bogus']);
    expect(unknown.stderr).to.match(
      /^error: unknown command 'bogus'\n(\(Did you mean \w+\?\)\n)?\(see: svc --help\)\n$/,
    );
    const missing = await svc(['fwd', 'add']);
    expect(missing.stderr.trim().split('\n')).to.have.length(2);
    expect(missing.stderr).to.match(/\(see: svc fwd add --help\)/);
    // `exec` is what people type: it is x.
    const exec = await svc(['exec', 'c8', '--', 'echo', 'via-exec']);
    expect(exec.code, exec.stderr).to.equal(0);
    expect(exec.stdout).to.equal('via-exec\n');
  });

  it('says what timed out, and how to bring back a VM whose agent cannot answer', async () => {
    const slow = await svc(['x', 'c8', '--timeout', '1s', '--', 'sleep', '5']);
    expect(slow.code).to.equal(124);
    expect(slow.stderr).to.equal('svc: sleep did not end within 1s; it was killed (exit 124)\n');
    const bare = await svc(['x', 'c8', '--timeout', '1', '--', 'sleep', '5']);
    expect(bare.stderr, 'whole seconds, said with their unit').to.equal(
      'svc: sleep did not end within 1 s; it was killed (exit 124)\n',
    );
    expect((await d.call('POST', '/vms', { name: 'c9', persistent: true })).status).to.equal(201);
    expect((await d.call('POST', '/vms/c9/suspend')).status).to.equal(200);
    const asleep = await svc(['x', 'c9', '--', 'true']);
    expect(asleep.code).to.equal(1);
    expect(asleep.stderr).to.contain(
      'vm c9 is suspended; its agent answers only while it runs: restore it first (svc restore c9',
    );
    // a restore whose saved state does not load cold-boots the VM, and says so
    d.daemon.container.get<InMemoryHypervisor>(Hypervisor).failNext('restore');
    const cold = await svc(['restore', 'c9']);
    expect([cold.code, cold.stdout]).to.deep.equal([0, 'vm c9 is running\n']);
    expect(cold.stderr).to.match(/^warning: cold-booted, its processes ended: the saved state did not load/);
    expect((await d.call('DELETE', '/vms/c9')).status).to.equal(200);
  });

  it('finds its daemon through --config, and says so when that file cannot be read', async () => {
    const cfg = join(d.dir, 'cli-config.yaml');
    writeFileSync(cfg, `socket: ${d.config.socket}\napi_token: test-token\n`);
    const bare = { PATH: process.env.PATH, HOME: d.dir };
    const viaConfig = await new Promise<CliRun>((resolve) => {
      const p = spawn(process.execPath, [SVC, '--config', cfg, 'ls', '--json'], { env: bare });
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (c) => (stdout += c));
      p.stderr.on('data', (c) => (stderr += c));
      p.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    });
    expect(viaConfig.code, viaConfig.stderr).to.equal(0);
    expect(JSON.parse(viaConfig.stdout).map((v: { name: string }) => v.name)).to.include('c8');
    const broken = await svc(['--config', join(d.dir, 'no-such.yaml'), 'ls']);
    expect(broken.code).to.equal(1);
    expect(broken.stderr).to.match(/cannot read config file .*no-such\.yaml/);
  });
});

describe('svcd in a terminal', function () {
  this.timeout(60000);
  const made: string[] = [];
  afterEach(() => made.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));

  it('prints a short banner: where it listens, the dashboard, the token, the next commands; then stops on Ctrl-C', async () => {
    const dir = join(tmpdir(), `svcd-banner-${process.pid}-${Date.now()}`);
    mkdirSync(dir, { recursive: true });
    made.push(dir);
    const cfg = join(dir, 'config.yaml');
    writeFileSync(
      cfg,
      `hypervisor: fake\ntest_mode: true\ndata_dir: ${dir}/data\nimages_dir: ${dir}/images\napi: 127.0.0.1:0\napi_token: banner-token\nlog_level: warn\n`,
    );
    const svcd = fileURLToPath(new URL('../../src/bin/svcd.js', import.meta.url));
    const term = inTerminal(
      svcd,
      ['--config', cfg],
      { PATH: process.env.PATH ?? '', HOME: dir },
      { cols: 120, rows: 30 },
    );
    await term.waitFor(/Stop with Ctrl-C/);
    const out = term.output();
    expect(out).to.match(/svcd \S+ is running \(fake, test mode\)/);
    expect(out).to.match(/dashboard {2}http:\/\/127\.0\.0\.1:\d+\/ui\//);
    expect(out).to.contain(`socket     ${dir}/data/svc.sock`);
    expect(out).to.contain('token      required');
    expect(out).to.not.contain('banner-token');
    expect(out).to.contain('svc new box');
    term.write('\x03');
    expect(await term.exit).to.equal(0);
  });
});
