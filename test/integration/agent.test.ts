import { expect } from 'chai';
import { createHash, randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import {
  createReadStream,
  createWriteStream,
  existsSync,
  linkSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import WebSocket from 'ws';
import { HttpGuestAgent } from '../../src/adapters/guest-link/http-guest-agent.js';
import { startLocalAgent, type LocalAgent } from '../../src/adapters/hypervisor/fake/local-agent-process.js';
import type { ExecRequest } from '../../src/domain/agent.js';
import { formatExecQuery } from '../../src/domain/query.js';
import { AgentUnavailableError, InvalidArgumentError } from '../../src/domain/errors.js';
import { readPieces } from '../../src/adapters/http-kit/output-pieces.js';
import { call, type Target, qs } from '../helpers/http.js';
import { tempDir } from '../helpers/daemon.js';
import { makeTar, readTar } from '../helpers/tar.js';
import { openShell } from '../helpers/ws-shell.js';
import { poll } from '../helpers/wait.js';

const isRoot = process.getuid?.() === 0;

describe('svc-agent over HTTP (real agent process)', function () {
  this.timeout(60000);
  let dir: string;
  let agent: LocalAgent;
  let t: Target;
  let work: string;

  before(async () => {
    dir = tempDir('svc-agent-');
    agent = await startLocalAgent(dir);
    t = { port: agent.port };
    work = join(dir, 'work');
    mkdirSync(work);
  });
  after(async () => {
    await agent.stop();
  });

  describe('health and readiness', () => {
    it('reports health (GET and HEAD) and the readiness files', async () => {
      const h = await call(t, 'GET', '/health');
      expect(h.json).to.include.keys('hostname', 'agent_version', 'agent_uptime_sec', 'userdata_ran', 'readiness');
      expect(h.json.userdata_ran).to.equal(false);
      expect(h.json.readiness).to.deep.equal({});
      expect((await call(t, 'HEAD', '/health')).status).to.equal(200);
      const state = join(dir, 'guest', 'var-lib-svc');
      mkdirSync(join(state, 'readiness'), { recursive: true });
      writeFileSync(join(state, 'readiness', 'state'), 'running\n');
      writeFileSync(join(state, 'readiness', 'phase'), 'install');
      writeFileSync(join(state, 'userdata-ran'), '');
      expect((await call(t, 'GET', '/readiness')).json).to.deep.equal({ state: 'running', phase: 'install' });
      const h2 = await call(t, 'GET', '/health');
      expect(h2.json.userdata_ran).to.equal(true);
      expect(h2.json.readiness.state).to.equal('running');
    });
  });

  describe('exec', () => {
    it('returns stdout, stderr and a non-zero exit code with 200', async () => {
      const r = await call(t, 'POST', `/exec?${qs({ cmd: 'sh', args: ['-c', 'echo out; echo err >&2; exit 7'] })}`);
      expect(r.status).to.equal(200);
      expect(r.json).to.deep.equal({ stdout: 'out\n', stderr: 'err\n', exit_code: 7 });
    });

    it("gives what it runs the stand-in guest's HOME, whose dotfiles a login shell reads (never this host user's)", async () => {
      const home = join(dir, 'guest', 'root');
      writeFileSync(join(home, '.profile'), 'echo "stand-in profile"\n');
      const r = await call(t, 'POST', `/exec?${qs({ cmd: 'bash', args: ['-l', '-c', 'echo "HOME=$HOME"'] })}`);
      expect(r.json).to.deep.equal({ stdout: `stand-in profile\nHOME=${home}\n`, stderr: '', exit_code: 0 });
    });

    it('keeps arguments intact (spaces, quotes, unicode)', async () => {
      const args = ['a b', '"q"', 'ünï', '$HOME', ''];
      const r = await call(t, 'POST', `/exec?${qs({ cmd: 'printf', args: ['%s|', ...args] })}`);
      expect(r.json.stdout).to.equal(args.map((a) => `${a}|`).join(''));
    });

    it('runs in cwd, feeds stdin, and reports a command that cannot start as 127', async () => {
      expect((await call(t, 'POST', `/exec?${qs({ cmd: 'pwd', cwd: work })}`)).json.stdout).to.equal(`${work}\n`);
      const stdin = randomBytes(100_000).toString('base64');
      const r = await call(t, 'POST', `/exec?${qs({ cmd: 'sha256sum' })}`, stdin, {
        'content-type': 'application/octet-stream',
      });
      expect(r.json.stdout.split(' ')[0]).to.equal(createHash('sha256').update(stdin).digest('hex'));
      const nf = await call(t, 'POST', `/exec?${qs({ cmd: '/no/such/binary' })}`);
      expect(nf.status).to.equal(200);
      expect(nf.json.exit_code).to.equal(127);
      expect(nf.json.error).to.equal('no program /no/such/binary in the guest');
      // a shell's own command, and a whole shell line as one word: said so, with what to do
      const cd = await call(t, 'POST', `/exec?${qs({ cmd: 'cd', args: '/tmp' })}`);
      expect(cd.json).to.deep.include({ exit_code: 127 });
      expect(cd.json.error).to.match(
        /^no command cd in the guest's PATH \(cd is part of the shell: run it in one, sh -c/,
      );
      const line = await call(t, 'POST', `/exec?${qs({ cmd: 'ls | wc -l' })}`);
      expect(line.json.error).to.match(
        /^no command ls \| wc -l in the guest's PATH \(a shell line\? run it in a shell/,
      );
      const badCwd = await call(t, 'POST', `/exec?${qs({ cmd: 'true', cwd: '/no/such/dir' })}`);
      expect(badCwd.json.exit_code).to.equal(127);
    });

    it('runs as another uid and gid', async function () {
      if (!isRoot) this.skip(); // switching users needs root; CI runs as root
      const r = await call(t, 'POST', `/exec?${qs({ cmd: 'id', uid: '65534', gid: '65534' })}`);
      expect(r.json.stdout).to.match(/uid=65534.*gid=65534/);
    });

    it('kills a command at its timeout, with its children, and reports exit -1', async () => {
      const t0 = Date.now();
      const r = await call(
        t,
        'POST',
        `/exec?${qs({ cmd: 'sh', args: ['-c', 'sleep 30 & sleep 30'], timeout: '500ms' })}`,
      );
      expect(Date.now() - t0).to.be.below(5000);
      expect(r.json.exit_code).to.equal(-1);
      expect(r.json.error).to.match(/timed out/);
    });

    it('returns when the command exits even if a background child keeps its output pipes open', async () => {
      const t0 = Date.now();
      const r = await call(t, 'POST', `/exec?${qs({ cmd: 'sh', args: ['-c', 'echo before; sleep 30 & echo after'] })}`);
      expect(Date.now() - t0).to.be.below(5000);
      expect(r.json).to.include({ exit_code: 0 });
      expect(r.json.stdout).to.equal('before\nafter\n');
    });

    it('returns base64 output with encoding=base64 and caps buffered output with truncated', async () => {
      const b = await call(t, 'POST', `/exec?${qs({ cmd: 'printf', args: ['\\377\\000'], encoding: 'base64' })}`);
      expect(Buffer.from(b.json.stdout, 'base64')).to.deep.equal(Buffer.from([0xff, 0]));
      const big = await call(
        t,
        'POST',
        `/exec?${qs({ cmd: 'head', args: ['-c', String(17 * 1024 * 1024), '/dev/zero'] })}`,
      );
      expect(big.json.truncated).to.equal(true);
      expect(big.json.stdout.length).to.equal(16 * 1024 * 1024);
    });

    it('streams frames in order, delivering output while the command still runs', async () => {
      const frames: { frame: Record<string, unknown>; at: number }[] = [];
      const t0 = Date.now();
      await new Promise<void>((resolve, reject) => {
        const req = request(
          {
            host: '127.0.0.1',
            port: agent.port,
            method: 'POST',
            path: `/exec?${qs({ cmd: 'sh', args: ['-c', 'echo one; sleep 1; echo two >&2; sleep 1; echo three; exit 4'], buffered: 'false' })}`,
          },
          (res) => {
            expect(res.headers['content-type']).to.match(/ndjson/);
            let buf = '';
            res.on('data', (c: Buffer) => {
              buf += c.toString();
              let i;
              while ((i = buf.indexOf('\n')) >= 0) {
                frames.push({ frame: JSON.parse(buf.slice(0, i)), at: Date.now() - t0 });
                buf = buf.slice(i + 1);
              }
            });
            res.on('end', resolve);
          },
        );
        req.on('error', reject);
        req.end();
      });
      expect(frames.map((f) => f.frame.type)).to.deep.equal(['started', 'stdout', 'stderr', 'stdout', 'exit']);
      expect(frames[0].frame.pid).to.be.a('number');
      expect(frames.map((f) => f.frame.data).filter(Boolean)).to.deep.equal(['one\n', 'two\n', 'three\n']);
      expect(frames.at(-1)!.frame.exit_code).to.equal(4);
      // "one" arrived about 2 s before the command ended, not at the end.
      expect(frames.at(-1)!.at - frames[1].at).to.be.above(1500);
    });

    it('kills a streamed command when the client goes away', async () => {
      const marker = join(work, 'still-running');
      await new Promise<void>((resolve) => {
        const req = request(
          {
            host: '127.0.0.1',
            port: agent.port,
            method: 'POST',
            path: `/exec?${qs({ cmd: 'sh', args: ['-c', `echo started; sleep 2; touch ${marker}`], buffered: 'false' })}`,
          },
          (res) => {
            res.once('data', () => {
              req.destroy();
              resolve();
            });
          },
        );
        req.end();
      });
      await new Promise((r) => setTimeout(r, 3000));
      expect(existsSync(marker)).to.equal(false);
    });

    it("sets env over the agent's own: repeated NAME=VALUE, a value with = kept whole", async () => {
      const script = 'printf "%s|%s|%s" "$A" "$B" "$PATH"';
      const r = await call(t, 'POST', `/exec?${qs({ cmd: 'sh', args: ['-c', script], env: ['A=x y=z', 'B=ünï'] })}`);
      expect(r.json).to.deep.include({ exit_code: 0, stdout: `x y=z|ünï|${process.env.PATH}` });
      const streamed = await call(
        t,
        'POST',
        `/exec?${qs({ cmd: 'printenv', args: ['A'], env: 'A=1', buffered: 'false' })}`,
      );
      const frames = streamed.text
        .trim()
        .split('\n')
        .map((l: string) => JSON.parse(l));
      expect(
        frames.filter((f: { type: string }) => f.type === 'stdout').map((f: { data: string }) => f.data),
      ).to.deep.equal(['1\n']);
    });

    it('refuses bad exec input with 400', async () => {
      for (const path of [
        '/exec',
        `/exec?${qs({ cmd: 'true', env: 'NOEQUALS' })}`,
        `/exec?${qs({ cmd: 'true', env: '1A=x' })}`,
        `/exec?${qs({ cmd: 'true', buffered: 'maybe' })}`,
        `/exec?${qs({ cmd: 'true', uid: '-1' })}`,
        `/exec?${qs({ cmd: 'true', timeout: 'x' })}`,
        `/exec?${qs({ cmd: 'true', cwd: 'rel' })}`,
      ]) {
        const r = await call(t, 'POST', path);
        expect(r.status, path).to.equal(400);
        expect(r.json.error).to.be.a('string');
      }
    });
  });

  describe("exec channel (GET /exec/channel, the daemon's way to run buffered execs)", () => {
    let client: HttpGuestAgent;
    beforeEach(() => {
      client = new HttpGuestAgent();
    });
    afterEach(() => client.close());

    it('answers as POST /exec does: output, exit codes, arguments, cwd, base64, a timeout', async () => {
      const ep = { host: '127.0.0.1', port: agent.port };
      const cases: ExecRequest[] = [
        { cmd: 'sh', args: ['-c', 'echo out; echo err >&2; exit 7'] },
        { cmd: 'printf', args: ['%s|', 'a b', '"q"', 'ünï', '$HOME', ''] },
        { cmd: 'pwd', args: [], cwd: work },
        { cmd: 'printf', args: ['\\377\\000'], encoding: 'base64' },
        { cmd: 'sh', args: ['-c', 'sleep 30 & sleep 30'], timeoutMs: 500 },
        { cmd: 'no-such-command-svc', args: [] },
        { cmd: 'sh', args: ['-c', 'printf %s "$A"'], env: { A: 'x y=z' } },
      ];
      for (const er of cases) {
        const http = await call(t, 'POST', `/exec?${formatExecQuery(er, true)}`);
        expect(await client.exec(ep, er), er.cmd).to.deep.equal(http.json);
      }
      const bad = await client.exec(ep, { cmd: 'true', args: [], cwd: 'relative' }).then(
        () => undefined,
        (e: Error) => e,
      );
      expect(bad).to.be.instanceOf(InvalidArgumentError);
    });

    it('kills the command of a caller that leaves, and every command of a channel that closes', async () => {
      const ep = { host: '127.0.0.1', port: agent.port };
      const sleeping = (secs: number) => {
        try {
          return execFileSync('pgrep', ['-fx', `sleep ${secs}`], { encoding: 'utf8' })
            .trim()
            .split('\n')
            .filter(Boolean).length;
        } catch {
          return 0;
        }
      };
      const settle = async (secs: number, n: number) => {
        await poll(() => sleeping(secs) === n, { ms: 15_000 });
        return sleeping(secs);
      };
      const leave = new AbortController();
      const left = client.exec(ep, { cmd: 'sleep', args: ['71'] }, undefined, leave.signal).catch((e: Error) => e);
      expect(await settle(71, 1)).to.equal(1);
      leave.abort();
      expect(await left).to.be.instanceOf(AgentUnavailableError);
      expect(await settle(71, 0)).to.equal(0);

      const running = [
        client.exec(ep, { cmd: 'sleep', args: ['72'] }).catch((e: Error) => e),
        client.exec(ep, { cmd: 'sleep', args: ['72'] }).catch((e: Error) => e),
      ];
      expect(await settle(72, 2)).to.equal(2);
      client.close();
      for (const r of await Promise.all(running)) expect(r).to.be.instanceOf(AgentUnavailableError);
      expect(await settle(72, 0)).to.equal(0);
    });

    it('refuses a WebSocket from a web page (a foreign Origin) on the channel and the shell, before anything runs', async () => {
      for (const path of ['/exec/channel', '/shell']) {
        const ws = new WebSocket(`ws://127.0.0.1:${agent.port}${path}`, { headers: { origin: 'http://evil.example' } });
        const status = await new Promise<number>((resolve) => {
          ws.once('unexpected-response', (_req, res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          });
          ws.once('open', () => {
            ws.close();
            resolve(101);
          });
          ws.once('error', () => resolve(-1));
        });
        expect(status, path).to.equal(403);
      }
    });

    it('closes the socket (1008) on a message that is not a request', async () => {
      const ws = new WebSocket(`ws://127.0.0.1:${agent.port}/exec/channel`);
      await new Promise((r) => ws.once('open', r));
      const closed = new Promise<number>((r) => ws.once('close', (code) => r(code)));
      ws.send('{"id":"one","query":"cmd=true"}');
      expect(await closed).to.equal(1008);
    });
  });

  describe('shell', () => {
    it('runs a real terminal: round trip, resize seen by stty size, exit code', async () => {
      const sh = await openShell(`ws://127.0.0.1:${agent.port}/shell?cols=100&rows=30&shell=/bin/sh`);
      sh.send('stty size\n');
      await sh.waitFor(/30 100/);
      sh.resize(120, 40);
      await new Promise((r) => setTimeout(r, 200));
      sh.send('stty size; tty\n');
      await sh.waitFor(/40 120/);
      await sh.waitFor(/\/dev\/pts\/\d+/);
      sh.send('exit 3\n');
      const exit = await sh.exit;
      expect(exit).to.deep.equal({ exit_code: 3, closeCode: 1000 });
    });

    it('says a shell killed by a signal ended so (128 + the signal), not a clean exit', async () => {
      const sh = await openShell(`ws://127.0.0.1:${agent.port}/shell?shell=/bin/sh`);
      sh.send('echo PID=$$\n');
      const pid = Number((await sh.waitFor(/PID=\d+/)).slice(4));
      process.kill(pid, 'SIGKILL');
      expect(await sh.exit).to.deep.equal({ exit_code: 137, closeCode: 1000 });
    });

    it('kills the shell when the socket closes', async () => {
      const sh = await openShell(`ws://127.0.0.1:${agent.port}/shell?shell=/bin/sh`);
      sh.send('echo PID=$$\n');
      const pid = Number((await sh.waitFor(/PID=\d+/)).slice(4));
      sh.ws.close();
      await new Promise((r) => setTimeout(r, 500));
      expect(existsSync(`/proc/${pid}`)).to.equal(false);
    });

    it('runs a command in the terminal: its args, cwd and env, its size, its exit code', async () => {
      const script = 'stty size; printf "%s|%s|%s\\n" "$(pwd)" "$A" "$1"; exit 6';
      const sh = await openShell(
        `ws://127.0.0.1:${agent.port}/shell?${qs({ cmd: 'sh', args: ['-c', script, 'sh', 'arg one'], cwd: work, env: 'A=x=y', cols: '90', rows: '20' })}`,
      );
      await sh.waitFor(/20 90/);
      await sh.waitFor(new RegExp(`${work}\\|x=y\\|arg one`));
      expect(await sh.exit).to.deep.equal({ exit_code: 6, closeCode: 1000 });
    });

    it('refuses bad shell parameters before upgrading, and says a command that is not there', async () => {
      const err = await openShell(`ws://127.0.0.1:${agent.port}/shell?cols=0`).catch((e) => e);
      expect(err.status).to.equal(400);
      const missing = await openShell(`ws://127.0.0.1:${agent.port}/shell?cmd=no-such-command-svc`).catch((e) => e);
      expect(missing.status).to.equal(404);
    });
  });

  describe('cp', () => {
    it('round-trips a binary file byte-exact with permissions, creating parents', async () => {
      const data = randomBytes(3 * 1024 * 1024 + 17);
      const path = join(work, 'deep', 'er', 'blob.bin');
      const put = await call(t, 'PUT', `/cp?${qs({ path, permissions: '0640' })}`, data, {
        'content-type': 'application/octet-stream',
      });
      expect(put.status).to.equal(204);
      expect(statSync(path).mode & 0o777).to.equal(0o640);
      const got = await rawGet(agent.port, `/cp?${qs({ path })}`);
      expect(got.type).to.equal('application/octet-stream');
      expect(got.body.equals(data)).to.equal(true);
    });

    it('writes atomically: a failed upload leaves the old file whole', async () => {
      const path = join(work, 'atomic.txt');
      writeFileSync(path, 'old content');
      await new Promise<void>((resolve) => {
        const req = request({
          host: '127.0.0.1',
          port: agent.port,
          method: 'PUT',
          path: `/cp?${qs({ path })}`,
          headers: { 'content-length': '1000000' },
        });
        req.on('error', () => resolve());
        req.write(Buffer.alloc(1000, 1), () =>
          setTimeout(() => {
            req.destroy();
            resolve();
          }, 200),
        );
      });
      await new Promise((r) => setTimeout(r, 300));
      expect(readFileSync(path, 'utf8')).to.equal('old content');
    });

    it('sets uid and gid', async function () {
      if (!isRoot) this.skip(); // chown needs root; CI runs as root
      const path = join(work, 'owned');
      await call(t, 'PUT', `/cp?${qs({ path, uid: '65534', gid: '65534' })}`, Buffer.from('x'), {
        'content-type': 'application/octet-stream',
      });
      expect(statSync(path).uid).to.equal(65534);
      // the folders a write makes on the way are the same user's, and so is every entry of a tar
      const nested = join(work, 'owned-dir', 'x', 'f');
      await call(t, 'PUT', `/cp?${qs({ path: nested, uid: '65534', gid: '65534' })}`, Buffer.from('x'), {
        'content-type': 'application/octet-stream',
      });
      for (const p of [join(work, 'owned-dir'), join(work, 'owned-dir', 'x'), nested])
        expect(statSync(p), p).to.include({ uid: 65534, gid: 65534 });
      const tree = join(work, 'owned-tree', 'new');
      const body = await makeTar([
        { name: 'd/', type: 'directory', mode: 0o755 },
        { name: 'd/f', data: 'f' },
        { name: 'e/h', data: 'h' },
        { name: 'l', type: 'symlink', linkname: 'd/f' },
      ]);
      const put = await call(t, 'PUT', `/cp?${qs({ path: tree, mode: 'tar', uid: '65534', gid: '65534' })}`, body, {
        'content-type': 'application/x-tar',
      });
      expect(put.status).to.equal(204);
      for (const p of ['', 'd', 'd/f', 'e', 'e/h', 'l'].map((n) => join(tree, n)).concat(join(work, 'owned-tree')))
        expect(lstatSync(p), p).to.include({ uid: 65534, gid: 65534 });
      // without an owner, a tar's entries are as the archive says (root's here)
      const plain = join(work, 'plain-tree');
      await call(t, 'PUT', `/cp?${qs({ path: plain, mode: 'tar' })}`, body, { 'content-type': 'application/x-tar' });
      expect(lstatSync(join(plain, 'd', 'f'))).to.include({ uid: 0, gid: 0 });
    });

    it('copies a 200 MiB file both ways with bounded agent memory', async () => {
      // A fresh agent, so its peak RSS (VmHWM) belongs to this copy alone.
      const own = await startLocalAgent(tempDir('svc-agent-big-'));
      try {
        await bigCopy(own);
      } finally {
        await own.stop();
      }
    });

    async function bigCopy(agent: LocalAgent): Promise<void> {
      const src = join(dir, 'big.src');
      const hash = createHash('sha256');
      const out = createWriteStream(src);
      for (let i = 0; i < 200; i++) {
        const chunk = randomBytes(1024 * 1024);
        hash.update(chunk);
        if (!out.write(chunk)) await new Promise<void>((r) => out.once('drain', () => r()));
      }
      await new Promise<void>((r) => out.end(() => r()));
      const digest = hash.digest('hex');
      const dst = join(work, 'big.dst');
      await new Promise<void>((resolve, reject) => {
        const req = request(
          {
            host: '127.0.0.1',
            port: agent.port,
            method: 'PUT',
            path: `/cp?${qs({ path: dst })}`,
            headers: { 'content-type': 'application/octet-stream', 'content-length': String(200 * 1024 * 1024) },
          },
          (res) => {
            res.resume();
            res.on('end', () => (res.statusCode === 204 ? resolve() : reject(new Error(`status ${res.statusCode}`))));
          },
        );
        req.on('error', reject);
        createReadStream(src).pipe(req);
      });
      const back = createHash('sha256');
      await new Promise<void>((resolve, reject) => {
        request({ host: '127.0.0.1', port: agent.port, path: `/cp?${qs({ path: dst })}` }, (res) => {
          expect(res.headers['content-length']).to.equal(String(200 * 1024 * 1024));
          res.on('data', (c: Buffer) => back.update(c));
          res.on('end', resolve);
          res.on('error', reject);
        }).end();
      });
      expect(back.digest('hex')).to.equal(digest);
      const hwm = Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${agent.pid}/status`, 'utf8'))![1]) * 1024;
      expect(hwm, `agent peak RSS ${Math.round(hwm / 1048576)} MiB`).to.be.below(160 * 1024 * 1024);
    }

    it('round-trips a tree as tar with modes and symlinks', async () => {
      const tree = join(work, 'tree');
      mkdirSync(join(tree, 'sub', 'deeper'), { recursive: true });
      writeFileSync(join(tree, 'a.sh'), '#!/bin/sh\necho a\n', { mode: 0o755 });
      writeFileSync(join(tree, 'sub', 'b.txt'), 'bee', { mode: 0o600 });
      writeFileSync(join(tree, 'sub', 'deeper', 'c'), randomBytes(5000));
      symlinkSync('sub/b.txt', join(tree, 'link'));
      const tarBuf = (await rawGet(agent.port, `/cp?${qs({ path: tree, mode: 'tar' })}`)).body;
      const listing = await readTar(tarBuf);
      expect([...listing.keys()].sort()).to.deep.equal([
        'a.sh',
        'link',
        'sub',
        'sub/b.txt',
        'sub/deeper',
        'sub/deeper/c',
      ]);
      expect(listing.get('a.sh')!.mode).to.equal(0o755);
      expect(listing.get('link')).to.include({ type: 'symlink', linkname: 'sub/b.txt' });
      const copy = join(work, 'tree-copy');
      const put = await call(t, 'PUT', `/cp?${qs({ path: copy, mode: 'tar' })}`, tarBuf, {
        'content-type': 'application/x-tar',
      });
      expect(put.status).to.equal(204);
      expect(statSync(join(copy, 'a.sh')).mode & 0o777).to.equal(0o755);
      expect(statSync(join(copy, 'sub', 'b.txt')).mode & 0o777).to.equal(0o600);
      expect(
        readFileSync(join(copy, 'sub', 'deeper', 'c')).equals(readFileSync(join(tree, 'sub', 'deeper', 'c'))),
      ).to.equal(true);
      expect(lstatSync(join(copy, 'link')).isSymbolicLink()).to.equal(true);
      expect(readlinkSync(join(copy, 'link'))).to.equal('sub/b.txt');
      const one = await readTar(
        (await rawGet(agent.port, `/cp?${qs({ path: join(tree, 'sub', 'b.txt'), mode: 'tar' })}`)).body,
      );
      expect([...one.keys()]).to.deep.equal(['b.txt']);
      expect(one.get('b.txt')!.data.toString()).to.equal('bee');
    });

    it('refuses every tar entry that would land outside or go through a link (400), writing nothing outside', async () => {
      const target = join(work, 'jail');
      mkdirSync(target, { recursive: true });
      symlinkSync(dir, join(target, 'door'));
      const attacks = [
        [{ name: '../escaped-dotdot', data: 'x' }],
        [{ name: 'a/../../escaped-nested', data: 'x' }],
        [{ name: '/tmp/escaped-absolute', data: 'x' }],
        [{ name: 'door/escaped-through-link', data: 'x' }],
        [
          { name: 'evil', type: 'symlink' as const, linkname: dir },
          { name: 'evil/escaped-abs-link', data: 'x' },
        ],
        // a chain of links, each harmless alone: x -> . then x/y -> .. then a file under x/y/
        [
          { name: 'x', type: 'symlink' as const, linkname: '.' },
          { name: 'x/y', type: 'symlink' as const, linkname: '..' },
          { name: 'x/y/escaped-chain', data: 'x' },
        ],
        [
          { name: 'up', type: 'symlink' as const, linkname: '..' },
          { name: 'up/escaped-dir', type: 'directory' as const },
        ],
        [{ name: 'hard', type: 'link' as const, linkname: '/etc/passwd' }],
        [{ name: 'hard2', type: 'link' as const, linkname: '../outside' }],
        [{ name: 'hard3', type: 'link' as const, linkname: 'door/secret' }],
      ];
      writeFileSync(join(dir, 'secret'), 'host secret');
      for (const entries of attacks) {
        const r = await call(t, 'PUT', `/cp?${qs({ path: target, mode: 'tar' })}`, await makeTar(entries), {
          'content-type': 'application/x-tar',
        });
        expect(r.status, JSON.stringify(entries)).to.equal(400);
        expect(r.json.error, JSON.stringify(entries)).to.match(/outside|through the link|not a file extracted/);
      }
      for (const f of [
        'escaped-dotdot',
        'escaped-nested',
        'escaped-through-link',
        'escaped-abs-link',
        'escaped-chain',
        'escaped-dir',
      ]) {
        expect(existsSync(join(work, f)) || existsSync(join(dir, f)), f).to.equal(false);
      }
      expect(existsSync('/tmp/escaped-absolute')).to.equal(false);
      expect(existsSync(join(target, 'hard3'))).to.equal(false);
      const garbage = await call(t, 'PUT', `/cp?${qs({ path: target, mode: 'tar' })}`, randomBytes(2048), {
        'content-type': 'application/x-tar',
      });
      expect(garbage.status).to.equal(400);
    });

    it('copies in trees as GNU tar and bsdtar make them: ./ entries, absolute links (a venv), hard links, long names', async () => {
      const src = join(work, 'venv-src');
      const long = 'd'.repeat(120);
      mkdirSync(join(src, 'bin'), { recursive: true });
      mkdirSync(join(src, 'lib', 'python3.11', 'site-packages', long), { recursive: true });
      symlinkSync('/usr/bin/python3', join(src, 'bin', 'python3'));
      symlinkSync('python3', join(src, 'bin', 'python'));
      writeFileSync(join(src, 'bin', 'activate'), 'export VIRTUAL_ENV=/opt/venv\n', { mode: 0o755 });
      writeFileSync(join(src, 'lib', 'python3.11', 'site-packages', long, `${'f'.repeat(150)}.py`), 'print(1)\n');
      writeFileSync(join(src, 'pyvenv.cfg'), 'home = /usr/bin\n');
      linkSync(join(src, 'pyvenv.cfg'), join(src, 'pyvenv-hard.cfg'));
      symlinkSync('/nonexistent/anywhere', join(src, 'dangling'));
      const makers: [string, string[]][] = [
        ['gnu', ['tar', '-C', src, '-cf', '-', '.']],
        ['gnu-posix', ['tar', '--format=posix', '-C', src, '-cf', '-', '.']],
        ['bsdtar', ['bsdtar', '-C', src, '-cf', '-', '.']],
      ];
      for (const [what, [cmd, ...args]] of makers) {
        const archive = execFileSync(cmd, args, { maxBuffer: 1 << 26 });
        const dest = join(work, `venv-${what}`);
        mkdirSync(dest);
        const r = await call(t, 'PUT', `/cp?${qs({ path: dest, mode: 'tar' })}`, archive, {
          'content-type': 'application/x-tar',
        });
        expect(r.status, `${what}: ${r.text}`).to.equal(204);
        expect(treeOf(dest), what).to.deep.equal(treeOf(src));
        expect(lstatSync(join(dest, 'pyvenv-hard.cfg')).ino, `${what}: hard link`).to.equal(
          lstatSync(join(dest, 'pyvenv.cfg')).ino,
        );
      }
    });

    it('answers 400 for a binary GET of a directory and 404 for a missing file', async () => {
      expect((await call(t, 'GET', `/cp?${qs({ path: work })}`)).status).to.equal(400);
      expect((await call(t, 'GET', `/cp?${qs({ path: join(work, 'missing') })}`)).status).to.equal(404);
      expect((await call(t, 'GET', `/cp?${qs({ path: 'relative' })}`)).status).to.equal(400);
      expect((await call(t, 'GET', `/cp?${qs({ path: work, mode: 'zip' })}`)).status).to.equal(400);
    });
  });

  describe('fs', () => {
    it('makes, lists, stats, links and removes, with the right statuses', async () => {
      const base = join(work, 'fs');
      expect(
        (await call(t, 'POST', '/fs/mkdir', { path: join(base, 'x', 'y'), recursive: true, mode: '0700' })).status,
      ).to.equal(204);
      expect(statSync(join(base, 'x', 'y')).mode & 0o777).to.equal(0o700);
      expect((await call(t, 'POST', '/fs/mkdir', { path: join(base, 'p', 'q') })).status).to.equal(404);
      expect((await call(t, 'POST', '/fs/mkdir', { path: join(base, 'x') })).status).to.equal(409);
      writeFileSync(join(base, 'b.txt'), 'hello');
      expect((await call(t, 'POST', '/fs/symlink', { path: join(base, 'a-link'), target: 'b.txt' })).status).to.equal(
        204,
      );
      const list = (await call(t, 'GET', `/fs/readdir?${qs({ path: base })}`)).json;
      expect(list.map((e: { name: string }) => e.name)).to.deep.equal(['a-link', 'b.txt', 'x']);
      expect(list[0]).to.include({ type: 'symlink', target: 'b.txt' });
      expect(list[1]).to.include({ type: 'file', size: 5, path: join(base, 'b.txt') });
      expect(list[1].mode).to.match(/^0[0-7]{3}$/);
      expect(new Date(list[1].mtime).getTime()).to.be.above(0);
      const st = (await call(t, 'GET', `/fs/stat?${qs({ path: join(base, 'a-link') })}`)).json;
      expect(st).to.include({ type: 'symlink', target: 'b.txt', name: 'a-link' });
      expect((await call(t, 'GET', `/fs/stat?${qs({ path: join(base, 'nope') })}`)).status).to.equal(404);
      expect((await call(t, 'GET', `/fs/readdir?${qs({ path: join(base, 'nope') })}`)).status).to.equal(404);
      expect((await call(t, 'GET', '/fs/stat?path=relative')).status).to.equal(400);
      expect((await call(t, 'GET', '/fs/stat')).status).to.equal(400);
      expect((await call(t, 'DELETE', `/fs/remove?${qs({ path: join(base, 'x') })}`)).status).to.equal(409);
      expect(
        (await call(t, 'DELETE', `/fs/remove?${qs({ path: join(base, 'x'), recursive: 'true' })}`)).status,
      ).to.equal(204);
      expect((await call(t, 'DELETE', `/fs/remove?${qs({ path: join(base, 'a-link') })}`)).status).to.equal(204);
      expect(existsSync(join(base, 'b.txt'))).to.equal(true);
      expect((await call(t, 'DELETE', `/fs/remove?${qs({ path: join(base, 'gone') })}`)).status).to.equal(404);
      expect((await call(t, 'POST', '/fs/mkdir', { path: 'rel' })).status).to.equal(400);
      expect((await call(t, 'POST', '/fs/mkdir', { path: join(base, 'm'), mode: 'rwx' })).status).to.equal(400);
      expect((await call(t, 'POST', '/fs/symlink', { path: join(base, 'l2') })).status).to.equal(400);
    });
  });

  describe('durable processes', () => {
    it("reads a running process's journal in pieces of 256 KiB, an ended one's in pieces of 1 MiB", async () => {
      const MiB = 1 << 20;
      const made = await call(t, 'POST', '/processes', {
        cmd: 'sh',
        args: ['-c', `head -c ${3 * MiB} /dev/zero | tr '\\0' a; sleep 60`],
      });
      expect(made.status, made.text).to.equal(201);
      const pieces = async () => {
        const r = await call(t, 'GET', `/processes/${made.json.id}/output?raw=1&follow=0`);
        expect(r.status, r.text).to.equal(200);
        const sizes: number[] = [];
        for await (const p of readPieces(Readable.from([Buffer.from(r.text)]), 1024, 4 * MiB))
          if (p.bytes) sizes.push(p.bytes.length);
        return sizes;
      };
      await poll(async () => (await pieces()).reduce((a, b) => a + b, 0) >= 3 * MiB, { ms: 15_000, every: 50 });
      // Read again once all of it is there: a read made while the process still wrote ends its
      // pieces where the bytes ended at that moment (a short piece, then the rest: CI 2026-12-06).
      expect(await pieces()).to.deep.equal(Array(12).fill(256 * 1024));
      expect((await call(t, 'POST', `/processes/${made.json.id}/signal`, { signal: 'KILL' })).status).to.equal(204);
      await poll(async () => (await call(t, 'GET', `/processes/${made.json.id}`)).json.state === 'ended', {
        ms: 10_000,
        every: 50,
      });
      expect(await pieces()).to.deep.equal([MiB, MiB, MiB]);
      expect((await call(t, 'DELETE', `/processes/${made.json.id}`)).status).to.equal(204);
    });
  });

  describe('stats and secrets', () => {
    it('reports plausible stats', async () => {
      const s = (await call(t, 'GET', '/stats')).json;
      expect(s.uptime_sec).to.be.above(0);
      expect(s.mem_total_bytes).to.be.above(s.mem_available_bytes);
      expect(s.mem_available_bytes).to.be.above(0);
      expect(s.load1).to.be.at.least(0);
      expect(s.cpus).to.be.at.least(1);
      expect(s.disk_total_bytes).to.be.above(s.disk_free_bytes);
    });

    it('materializes secrets atomically with their mode, default path under run-dir', async () => {
      const value = 'p@ss w0rd\n';
      const r = await call(t, 'POST', '/secrets/materialize', {
        name: 'DB_PASS',
        data: Buffer.from(value).toString('base64'),
      });
      expect(r.status).to.equal(200);
      const expected = join(dir, 'guest', 'run-svc', 'secrets', 'DB_PASS');
      expect(r.json).to.deep.equal({ path: expected, mode: '0600' });
      expect(readFileSync(expected, 'utf8')).to.equal(value);
      expect(statSync(expected).mode & 0o777).to.equal(0o600);
      expect(statSync(join(dir, 'guest', 'run-svc', 'secrets')).mode & 0o777).to.equal(0o700);
      const custom = join(work, 'etc', 'app.key');
      const r2 = await call(t, 'POST', '/secrets/materialize', { name: 'k', data: 'AAEC', path: custom, mode: '0440' });
      expect(r2.json).to.deep.equal({ path: custom, mode: '0440' });
      expect(readFileSync(custom)).to.deep.equal(Buffer.from([0, 1, 2]));
      expect(statSync(custom).mode & 0o777).to.equal(0o440);
      expect(readFileSync(join(dir, 'agent.log'), 'utf8')).not.to.contain('p@ss');
      for (const body of [
        { name: 'x' },
        { name: '1x', data: '' },
        { name: 'x', data: '!!' },
        { name: 'x', data: '', path: 'rel' },
        { name: 'x', data: '', mode: '9' },
      ]) {
        expect((await call(t, 'POST', '/secrets/materialize', body)).status, JSON.stringify(body)).to.equal(400);
      }
    });
  });

  it('answers 404 {error} on unknown routes', async () => {
    const r = await call(t, 'GET', '/nope');
    expect(r.status).to.equal(404);
    expect(r.json.error).to.be.a('string');
  });
  describe('stopping', () => {
    it("stops on SIGTERM (a guest's shutdown) at once, a shell's WebSocket open or not", async () => {
      const own = await startLocalAgent(tempDir('svc-agent-term-'));
      const sh = await openShell(`ws://127.0.0.1:${own.port}/shell?shell=/bin/sh`);
      sh.send('echo up\n');
      await sh.waitFor(/up/);
      try {
        process.kill(own.pid, 'SIGTERM');
        // an upgraded socket once held the server open until its far end let go (never, here)
        const closed = await Promise.race([
          sh.exit.then(() => 'closed'),
          new Promise((r) => setTimeout(r, 10_000, 'open')),
        ]);
        expect(closed).to.equal('closed');
        await poll(() => !alive(own.pid), { ms: 5000 });
        expect(alive(own.pid), 'the agent exited').to.equal(false);
      } finally {
        sh.ws.terminate();
        await own.stop();
      }
    });
  });
});

function rawGet(port: number, path: string): Promise<{ type: string; body: Buffer }> {
  return new Promise((resolve, reject) => {
    request({ host: '127.0.0.1', port, path }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () =>
        resolve({ type: String(res.headers['content-type']).split(';')[0], body: Buffer.concat(parts) }),
      );
      res.on('error', reject);
    })
      .on('error', reject)
      .end();
  });
}

/** A tree as a comparable listing: each path with its type, mode, link target and content hash. */
function treeOf(root: string): string[] {
  const out: string[] = [];
  const walk = (rel: string) => {
    for (const name of readdirSync(join(root, rel)).sort()) {
      const p = rel ? `${rel}/${name}` : name;
      const st = lstatSync(join(root, p));
      const mode = (st.mode & 0o7777).toString(8);
      if (st.isSymbolicLink()) out.push(`${p} -> ${readlinkSync(join(root, p))}`);
      else if (st.isDirectory()) {
        out.push(`${p}/ ${mode}`);
        walk(p);
      } else
        out.push(
          `${p} ${mode} ${createHash('sha1')
            .update(readFileSync(join(root, p)))
            .digest('hex')}`,
        );
    }
  };
  walk('');
  return out;
}

/** Whether a process is there (not reaped). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
