import { expect } from 'chai';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createHash, randomBytes } from 'node:crypto';
import { execFileSync, spawn } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { request } from 'node:http';
import { connect, createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { SilentLogger } from '../fakes/fakes.js';
import type { TestDaemon } from '../helpers/daemon.js';
import { ndjson, qs } from '../helpers/http.js';
import { openShell } from '../helpers/ws-shell.js';
import { runSvc } from '../helpers/svc-cli.js';
import { waitFor } from '../helpers/wait.js';
import { qemuProcesses } from './image.js';
import { startSeededDaemon } from './snapshot-seeds.js';

const SVC_BIN = fileURLToPath(new URL('../../src/bin/svc.js', import.meta.url));

/** Userdata of the main test VM: a web page served by busybox httpd, and bootstrap readiness. */
const USERDATA = `#!/bin/sh
mkdir -p /srv/www && echo "hello from the guest" > /srv/www/index.html
busybox httpd -p 8080 -h /srv/www
echo running > /var/lib/svc/readiness/state
sleep 1
echo ready > /var/lib/svc/readiness/state
`;

describe('svcd with QEMU: real guests end to end', function () {
  this.timeout(240_000);
  let d: TestDaemon;
  const logs = new SilentLogger();
  const names = ['main', 'eph', 'ud'];

  before(async () => {
    d = await startSeededDaemon(
      { kind: 'minimal', memory_mb: 512 },
      {
        sandbox_metrics_interval: '1s',
        shutdown_timeout: '30s',
        ready_timeout: '180s',
        log_max_mb: 1,
      },
      { logger: logs },
    );
  });
  after(async () => {
    for (const n of names) await d.call('DELETE', `/vms/${n}`).catch(() => undefined);
    await d.stop();
  });

  it('creates: non-stream with wait=bootstrap (userdata sets readiness), streamed with wait=ssh, wait=userdata', async () => {
    const [main, eph, ud] = await Promise.all([
      d.call('POST', '/vms?wait=bootstrap', {
        name: 'main',
        persistent: true,
        memory_mb: 512,
        userdata: USERDATA,
        forwards: [{ guest_port: 8080 }],
      }),
      d.call('POST', '/vms?stream=1&wait=ssh', { name: 'eph', memory_mb: 384 }),
      d.call('POST', '/vms?wait=userdata', {
        name: 'ud',
        memory_mb: 384,
        userdata: '#!/bin/sh\nsleep 2\necho done > /root/ud\n',
      }),
    ]);
    expect(main.status, main.text).to.equal(201);
    expect(main.json.status).to.equal('running');
    const events = ndjson(eph.text);
    expect(
      events.map((e) => e.phase),
      eph.text,
    ).to.deep.equal(['accepted', 'disk', 'boot', 'wait_ssh', 'ready']);
    expect(ud.status, ud.text).to.equal(201);
    const udFile = await d.call('POST', `/vms/ud/exec?${qs({ cmd: 'cat', args: ['/root/ud'] })}`);
    expect(udFile.json.stdout).to.equal('done\n');
    // the system says what it is, as os-release(5) asks (scripts and Python's platform read it)
    const os = await d.call(
      'POST',
      `/vms/ud/exec?${qs({ cmd: 'sh', args: ['-c', '. /etc/os-release; echo $ID $VERSION_ID'] })}`,
    );
    expect(os.json.stdout).to.match(/^svc-minimal \d+\.\d+(\.\d+)?\n$/);
    const health = (await d.call('GET', '/vms/main/agent/health')).json;
    expect(health).to.include({ hostname: 'main', userdata_ran: true });
    expect(health.readiness.state).to.equal('ready');
    const boot = main.json.forwards.find((f: { guest_port: number }) => f.guest_port === 8080);
    expect(await httpGet(boot.host_port)).to.equal('hello from the guest\n');
  });

  it('runs exec, cp both ways, fs ops and a shell in the guest', async () => {
    const r = await d.call(
      'POST',
      `/vms/main/exec?${qs({ cmd: 'sh', args: ['-c', 'uname -s; cat; exit 3'] })}`,
      'stdin!',
      { 'content-type': 'application/octet-stream' },
    );
    expect(r.json).to.deep.equal({ stdout: 'Linux\nstdin!', stderr: '', exit_code: 3 });
    const blob = randomBytes(2 * 1024 * 1024 + 5);
    expect(
      (
        await d.call('PUT', '/vms/main/cp?path=/root/blob.bin&permissions=0600', blob, {
          'content-type': 'application/octet-stream',
        })
      ).status,
    ).to.equal(204);
    const sum = await d.call(
      'POST',
      `/vms/main/exec?${qs({ cmd: 'sh', args: ['-c', 'stat -c %a /root/blob.bin; md5sum /root/blob.bin'] })}`,
    );
    expect(sum.json.stdout).to.match(/^600\n[0-9a-f]{32}/);
    const back = await rawGet(d, '/vms/main/cp?path=/root/blob.bin');
    expect(back.equals(blob)).to.equal(true);
    expect((await d.call('POST', '/vms/main/fs/mkdir', { path: '/root/a/b', recursive: true })).status).to.equal(204);
    expect((await d.call('POST', '/vms/main/fs/symlink', { path: '/root/a/l', target: 'b' })).status).to.equal(204);
    const ls = (await d.call('GET', '/vms/main/fs/readdir?path=/root/a')).json;
    expect(ls.map((e: { name: string; type: string }) => `${e.name}:${e.type}`)).to.deep.equal([
      'b:directory',
      'l:symlink',
    ]);
    expect((await d.call('GET', '/vms/main/fs/stat?path=/root/none')).status).to.equal(404);
    expect((await d.call('DELETE', '/vms/main/fs/remove?path=/root/a&recursive=true')).status).to.equal(204);
    const sh = await openShell(`ws://127.0.0.1:${d.tcp.port}/vms/main/shell?cols=77&rows=22`, {
      authorization: 'Bearer test-token',
    });
    sh.send('stty size; hostname\n');
    await sh.waitFor(/22 77/);
    await sh.waitFor(/main/);
    sh.send('exit 0\n');
    expect((await sh.exit).exit_code).to.equal(0);
  });

  it('runs QEMU as an unprivileged user (qemu_user) when the daemon is root, under seccomp', async () => {
    const pid = Number(qemuProcesses(d.config.data_dir, ['main'])[0]?.split(' ')[0]);
    const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
    // a root daemon drops QEMU to nobody; a daemon run by a user starts it as that user
    expect(uid).to.equal(
      process.getuid?.() === 0
        ? Number(execFileSync('id', ['-u', 'nobody'], { encoding: 'utf8' }).trim())
        : process.getuid?.(),
    );
    expect(readFileSync(`/proc/${pid}/status`, 'utf8')).to.match(/^Seccomp:\s+2$/m);
  });

  // 64 MiB: larger than any buffer on the way (the agent's pieces are 1 MiB, the splice helper's
  // 4 MiB threshold); a copy's peak memory is checked on 256 MiB with a local agent
  // (test/integration/proxy-bigcopy.test.ts), where it costs seconds, not the 100 s of 200 MiB here.
  it('copies 64 MiB both ways through the daemon, byte-exact, streamed', async () => {
    const size = 64 * 1024 * 1024;
    const up = createHash('sha256');
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(
        {
          socketPath: d.config.socket,
          method: 'PUT',
          path: '/vms/main/cp?path=/root/big.bin',
          headers: {
            authorization: 'Bearer test-token',
            'content-type': 'application/octet-stream',
            'content-length': String(size),
          },
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        },
      );
      req.on('error', reject);
      let left = size;
      const more = () => {
        while (left > 0) {
          const c = randomBytes(Math.min(left, 1 << 20));
          left -= c.length;
          up.update(c);
          if (!req.write(c)) return void req.once('drain', more);
        }
        req.end();
      };
      more();
    });
    expect(status).to.equal(204);
    const sent = up.digest('hex');
    const inGuest = await d.call(
      'POST',
      `/vms/main/exec?${qs({ cmd: 'sh', args: ['-c', 'sha256sum /root/big.bin; stat -c %s /root/big.bin'] })}`,
    );
    expect(inGuest.json.stdout).to.equal(`${sent}  /root/big.bin\n${size}\n`);
    const down = createHash('sha256');
    let got = 0;
    await new Promise<void>((resolve, reject) => {
      request(
        {
          socketPath: d.config.socket,
          path: '/vms/main/cp?path=/root/big.bin',
          headers: { authorization: 'Bearer test-token' },
        },
        (res) => {
          expect(res.statusCode).to.equal(200);
          expect(res.headers['content-length']).to.equal(String(size));
          res.on('data', (c: Buffer) => {
            got += c.length;
            down.update(c);
          });
          res.on('end', resolve);
          res.on('error', reject);
        },
      )
        .on('error', reject)
        .end();
    });
    expect(got).to.equal(size);
    expect(down.digest('hex')).to.equal(sent);
    expect((await d.call('DELETE', '/vms/main/fs/remove?path=/root/big.bin')).status).to.equal(204);
  });

  it("runs a command in the guest through MCP (/mcp, the SDK's client)", async () => {
    const c = new Client({ name: 'svc-e2e', version: '1.0.0' });
    await c.connect(
      new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${d.tcp.port}/mcp`), {
        requestInit: { headers: { Authorization: `Bearer ${d.config.api_token}` } },
      }),
    );
    try {
      const r = await c.callTool({
        name: 'exec',
        arguments: {
          name: 'main',
          cmd: 'sh',
          args: ['-c', 'uname -s; cat /proc/sys/kernel/hostname; printf %s "$GREETING"'],
          env: { GREETING: 'hi there' },
        },
      });
      const out = JSON.parse((r as { content: { text: string }[] }).content[0].text) as {
        exit_code: number;
        stdout: string;
      };
      expect(out).to.deep.equal({ exit_code: 0, stdout: 'Linux\nmain\nhi there', stderr: '' });
    } finally {
      await c.close();
    }
  });

  it('works through the svc CLI: x with stdin, env and exit code, cp round trip', async () => {
    const env = {
      PATH: process.env.PATH,
      HOME: d.dir,
      SVC_SOCKET: d.config.socket,
      SVC_TOKEN: 'test-token',
      API_KEY: 'from-the-shell',
    };
    const svc = (args: string[], input?: string) =>
      new Promise<{ code: number; stdout: string }>((resolve) => {
        const p = spawn(process.execPath, [SVC_BIN, ...args], { env });
        let stdout = '';
        p.stdout.on('data', (c) => (stdout += c));
        p.on('close', (code) => resolve({ code: code ?? -1, stdout }));
        p.stdin.end(input);
      });
    const x = await svc(['x', 'main', '--', 'sh', '-c', 'tr a-z A-Z; exit 4'], 'guest\n');
    expect(x).to.deep.equal({ code: 4, stdout: 'GUEST\n' });
    // -e NAME=VALUE, and -e NAME from svc's own environment (never on a command line)
    const withEnv = await svc([
      'x',
      '-e',
      'A=x y=z',
      '-e',
      'API_KEY',
      'main',
      '--',
      'sh',
      '-c',
      'printf "%s|%s" "$A" "$API_KEY"',
    ]);
    expect(withEnv).to.deep.equal({ code: 0, stdout: 'x y=z|from-the-shell' });
    // -t: the command in a terminal of the guest (the agent's PTY), its code through
    const inTerminal = await svc(['x', '-t', 'main', '--', 'sh', '-c', 'tty; exit 5']);
    expect(inTerminal.code).to.equal(5);
    expect(inTerminal.stdout).to.match(/^\/dev\/pts\/\d+\r\n$/);
    const local = join(d.dir, 'cli.txt');
    writeFileSync(local, 'via cli');
    expect((await svc(['cp', local, 'main:/root/cli.txt'])).code).to.equal(0);
    expect((await svc(['cp', 'main:/root/cli.txt', join(d.dir, 'cli-back.txt')])).code).to.equal(0);
    expect(readFileSync(join(d.dir, 'cli-back.txt'), 'utf8')).to.equal('via cli');
    // into a directory of the guest under its own name, as cp does (it said "is a directory")
    expect((await svc(['cp', local, 'main:/tmp'])).code).to.equal(0);
    expect(await svc(['x', 'main', '--', 'cat', '/tmp/cli.txt'])).to.deep.include({ code: 0, stdout: 'via cli' });
    // NAME:file, as scp takes it: in root's home
    expect((await svc(['cp', local, 'main:in-home.txt'])).code).to.equal(0);
    expect(await svc(['x', 'main', 'cat', '/root/in-home.txt'])).to.deep.include({ code: 0, stdout: 'via cli' });
    // --user: what lands in the guest is that user's, the folders made on the way too; a tree without
    // it is root's (as docker cp), not this host's owners
    const tree = join(d.dir, 'owned-tree');
    mkdirSync(join(tree, 'sub'), { recursive: true });
    writeFileSync(join(tree, 'sub', 'f'), 'f');
    chownSync(join(tree, 'sub', 'f'), 1234, 1234);
    expect((await svc(['cp', '-u', 'nobody', tree, 'main:/tmp/nb/tree'])).code).to.equal(0);
    expect((await svc(['cp', '-u', 'nobody', local, 'main:/tmp/nb2/deep/'])).code).to.equal(0);
    expect((await svc(['cp', tree, 'main:/tmp/rt'])).code).to.equal(0);
    const owners = await svc([
      'x',
      'main',
      'stat',
      '-c',
      '%u:%g %n',
      '/tmp/nb',
      '/tmp/nb/tree/sub/f',
      '/tmp/nb2/deep/cli.txt',
      '/tmp/nb2',
      '/tmp/rt/sub/f',
    ]);
    expect(owners.stdout.trim().split('\n')).to.deep.equal([
      '65534:65534 /tmp/nb',
      '65534:65534 /tmp/nb/tree/sub/f',
      '65534:65534 /tmp/nb2/deep/cli.txt',
      '65534:65534 /tmp/nb2',
      '0:0 /tmp/rt/sub/f',
    ]);
  });

  it("logs in with OpenSSH's ssh (svc ssh, ssh-config): a key svc makes, added once; the host key pinned and held to (dropbear)", async () => {
    const env = { PATH: process.env.PATH, HOME: d.dir, SVC_SOCKET: d.config.socket, SVC_TOKEN: 'test-token' };
    // no ~/.ssh in this HOME: svc makes a key of its own with ssh-keygen
    const first = await runSvc(env, ['ssh', 'main', '--', 'id -un; hostname; exit 3']);
    expect(first, first.stderr).to.deep.include({ code: 3, stdout: 'root\nmain\n' });
    const dir = join(d.dir, '.config', 'svc');
    const pub = readFileSync(join(dir, 'id_ed25519.pub'), 'utf8').trim();
    expect((await runSvc(env, ['ssh', 'main', '--', 'true'])).code).to.equal(0);
    // -L passes on to ssh: a local port carried to the guest's own SSH server while the session lasts
    const port = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, '127.0.0.1', () => {
        const p = (probe.address() as AddressInfo).port;
        probe.close(() => resolve(p));
      });
    });
    const session = runSvc(env, ['ssh', '-L', `127.0.0.1:${port}:127.0.0.1:22`, 'main', '--', 'sleep 8']);
    const banner = await waitFor(
      "the forwarded port answering with the guest's SSH banner",
      () =>
        new Promise<string | undefined>((resolve) => {
          const c = connect(port, '127.0.0.1');
          c.once('data', (b) => (c.destroy(), resolve(b.toString('latin1'))));
          c.once('error', () => resolve(undefined));
        }),
      { ms: 20_000, every: 200 },
    );
    expect(banner).to.match(/^SSH-2\.0-dropbear/);
    expect((await session).code).to.equal(0);
    const keys = await d.call('POST', `/vms/main/exec?${qs({ cmd: 'cat', args: ['/root/.ssh/authorized_keys'] })}`);
    expect(
      keys.json.stdout.split('\n').filter((l: string) => l === pub),
      keys.json.stdout,
    ).to.have.length(1);
    // the key pinned is the one the guest's server shows, read through the agent
    const hostKey = (await d.call('GET', '/vms/main/ssh')).json.host_keys[0];
    expect(hostKey).to.match(/^ssh-ed25519 [A-Za-z0-9+/]+=*$/);
    expect(readFileSync(join(dir, 'known_hosts'), 'utf8')).to.equal(`svc-main ${hostKey}\n`);
    // ssh-config: plain ssh reaches it as svc-main; a key that is not the guest's is refused
    const cfg = join(d.dir, 'ssh_config');
    const block = await runSvc(env, ['ssh-config', 'main']);
    expect(block.stdout).to.match(/^Host svc-main\n {2}User root\n {2}ProxyCommand .* fwd stdio main 22\n/);
    writeFileSync(cfg, block.stdout);
    const ssh = (args: string[]) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
        const p = spawn('ssh', ['-F', cfg, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
        let stdout = '';
        let stderr = '';
        p.stdout.on('data', (c) => (stdout += c));
        p.stderr.on('data', (c) => (stderr += c));
        p.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
      });
    expect(await ssh(['svc-main', 'hostname'])).to.deep.include({ code: 0, stdout: 'main\n' });
    const other = execFileSync('ssh-keygen', ['-y', '-f', join(dir, 'id_ed25519')], { encoding: 'utf8' }).trim();
    writeFileSync(join(dir, 'known_hosts'), `svc-main ${other}\n`);
    const refused = await ssh(['svc-main', 'hostname']);
    expect(refused.code).to.equal(255);
    expect(refused.stderr).to.match(/REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed/);
    expect(refused.stdout).to.equal('');
  });

  it('carries a live forward to a server in the guest and materializes a secret', async () => {
    const f = await d.call('POST', '/vms/main/forwards', { guest_port: 8080 });
    expect(f.status, f.text).to.equal(201);
    expect(await httpGet(f.json.host_port)).to.equal('hello from the guest\n');
    await d.call('POST', '/secrets', { name: 'TOKEN', value: 'e2e-secret-value' });
    const s = await d.call('POST', '/vms/main/secrets/TOKEN');
    expect(s.json).to.deep.equal({ name: 'main', secret: 'TOKEN', path: '/run/svc/secrets/TOKEN', mode: '0600' });
    const cat = await d.call(
      'POST',
      `/vms/main/exec?${qs({ cmd: 'sh', args: ['-c', 'stat -c %a /run/svc/secrets/TOKEN; cat /run/svc/secrets/TOKEN'] })}`,
    );
    expect(cat.json.stdout).to.equal('600\ne2e-secret-value');
    expect(JSON.stringify(logs.lines)).not.to.contain('e2e-secret-value');
  });

  it('fills the stats history', async () => {
    await new Promise((r) => setTimeout(r, 3500));
    const m = (await d.call('GET', '/vms/main/metrics')).json;
    expect(m.points.length).to.be.at.least(2);
    expect(m.points.at(-1).mem_total_bytes).to.be.above(100 * 1024 * 1024);
  });

  it('caps the serial log of a guest that prints without end (log_max_mb), keeping one older copy', async () => {
    const serial = join(d.config.data_dir, 'vms', 'main', 'serial.log');
    const r = await d.call(
      'POST',
      `/vms/main/exec?${qs({ cmd: 'sh', args: ['-c', "head -c 1300000 /dev/zero | tr '\\0' x > /dev/ttyS0; echo done"], timeout: '120s' })}`,
    );
    expect(r.json.stdout, r.text).to.equal('done\n');
    let size = Infinity;
    for (let i = 0; i < 40 && !(existsSync(`${serial}.1`) && size <= 1 << 20); i++) {
      await new Promise((res) => setTimeout(res, 1000));
      size = statSync(serial).size;
    }
    expect(existsSync(`${serial}.1`), 'older copy').to.equal(true);
    expect(statSync(`${serial}.1`).size).to.be.above(1 << 20);
    expect(size).to.be.at.most(1 << 20);
    // QEMU carries on writing to the capped file
    await d.call('POST', `/vms/main/exec?${qs({ cmd: 'sh', args: ['-c', 'echo after-the-cap > /dev/ttyS0'] })}`);
    await new Promise((res) => setTimeout(res, 500));
    expect(readFileSync(serial, 'utf8')).to.contain('after-the-cap');
  });

  it('pauses (the agent stops answering) and resumes', async () => {
    await d.call('POST', '/vms/main/pause');
    expect((await d.call('GET', '/vms/main')).json.status).to.equal('paused');
    expect((await d.call('GET', '/vms/main/agent/health')).status).to.equal(503);
    await d.call('POST', '/vms/main/resume');
    expect((await d.call('GET', '/vms/main/agent/health')).status).to.equal(200);
  });

  it('suspends and restores: the guest keeps a process and a file, the clock is reset', async () => {
    const started = await d.call(
      'POST',
      `/vms/main/exec?${qs({ cmd: 'sh', args: ['-c', 'echo kept > /root/kept; sleep 100000 </dev/null >/dev/null 2>&1 & echo $!'] })}`,
    );
    const pid = started.json.stdout.trim();
    expect(pid).to.match(/^\d+$/);
    const s = await d.call('POST', '/vms/main/suspend');
    expect(s.json.message).to.equal('vm main suspended');
    expect(qemuProcesses(d.config.data_dir, ['main'])).to.deep.equal([]);
    await new Promise((r) => setTimeout(r, 3000));
    const r = await d.call('POST', '/vms/main/restore');
    expect(r.json.status).to.equal('running');
    expect(r.json.warning, 'the restore cold-booted').to.equal(undefined);
    const check = await d.call(
      'POST',
      `/vms/main/exec?${qs({ cmd: 'sh', args: ['-c', `cat /root/kept; kill -0 ${pid} && echo alive; date +%s`] })}`,
    );
    const [kept, alive, secs] = check.json.stdout.trim().split('\n');
    expect([kept, alive]).to.deep.equal(['kept', 'alive']);
    expect(Math.abs(Number(secs) - Date.now() / 1000)).to.be.below(5);
    const fwd = (await d.call('GET', '/vms/main')).json.forwards.find((f: { kind: string }) => f.kind === 'live');
    expect(await httpGet(fwd.host_port)).to.equal('hello from the guest\n');
  });

  it('reverts a running VM to a snapshot in place: its files, processes and clock as they were then', async () => {
    const sh = async (script: string) =>
      (await d.call('POST', `/vms/main/exec?${qs({ cmd: 'sh', args: ['-c', script] })}`)).json.stdout.trim();
    const pidA = await sh('echo one > /root/snap-a; sleep 100000 </dev/null >/dev/null 2>&1 & echo $!');
    const taken = await d.call('POST', '/vms/main/snapshots', { name: 'live' });
    expect(taken.status, taken.text).to.equal(201);
    expect(taken.json).to.include({ name: 'live', memory: true, taken_from: 'running' });
    expect((await d.call('GET', '/vms/main')).json.status).to.equal('running');
    const pidB = await sh(
      'echo two > /root/snap-a; echo b > /root/snap-b; sleep 100001 </dev/null >/dev/null 2>&1 & echo $!',
    );
    expect(pidB).to.match(/^\d+$/);
    const back = await d.call('POST', '/vms/main/snapshots/live/revert');
    expect(back.status, back.text).to.equal(200);
    expect(back.json.status).to.equal('running');
    expect(back.json.warning, 'the revert cold-booted').to.equal(undefined);
    // The guest's pids go back too, so B's pid may be some other process now: what runs there is checked.
    const cmd = (pid: string) => `tr '\\0' ' ' < /proc/${pid}/cmdline 2>/dev/null; echo`;
    const seen = await sh(
      `cat /root/snap-a; test -e /root/snap-b && echo b-kept || echo b-gone; ${cmd(pidA)}; ${cmd(pidB)}; date +%s`,
    );
    const [a, b, procA, procB, secs] = seen.split('\n');
    expect([a, b, procA.trim()]).to.deep.equal(['one', 'b-gone', 'sleep 100000']);
    expect(procB.trim()).to.not.equal('sleep 100001');
    expect(Math.abs(Number(secs) - Date.now() / 1000)).to.be.below(5);
    const fwd = (await d.call('GET', '/vms/main')).json.forwards.find((f: { kind: string }) => f.kind === 'live');
    expect(await httpGet(fwd.host_port)).to.equal('hello from the guest\n');
    expect(readdirSync(join(d.config.data_dir, 'vms', 'main', 'snapshots'))).to.deep.equal(['live']);
    // A new VM from the snapshot: the guest as it was then, its own machine, while main runs on.
    const kid = await d.call('POST', '/vms', { name: 'snapkid', from: 'main', snapshot: 'live' });
    expect(kid.status, kid.text).to.equal(201);
    expect(kid.json).to.include({ from: 'main', status: 'running' });
    expect(kid.json.warning, 'the new VM cold-booted').to.equal(undefined);
    const inKid = await d.call(
      'POST',
      `/vms/snapkid/exec?${qs({ cmd: 'sh', args: ['-c', `cat /root/snap-a; ${cmd(pidA)}; hostname`] })}`,
    );
    const [kidA, kidProc, kidHost] = inKid.json.stdout.trim().split('\n');
    expect([kidA, kidProc.trim(), kidHost]).to.deep.equal(['one', 'sleep 100000', 'snapkid']);
    expect((await d.call('DELETE', '/vms/snapkid')).status).to.equal(200);
    // The first new VM loaded the snapshot's memory stream; the second makes it a RAM image, in the
    // stream's place, and maps it (as later ones and a revert do).
    const live = () => readdirSync(join(d.config.data_dir, 'vms', 'main', 'snapshots', 'live'));
    const kinds = () =>
      live()
        .filter((f) => /\.(ram|dev|state)$/.test(f))
        .map((f) => f.replace(/^.*\./, ''));
    expect(kinds(), live().join(' ')).to.deep.equal(['state']);
    const kid2 = await d.call('POST', '/vms', { name: 'snapkid2', from: 'main', snapshot: 'live' });
    expect(kid2.status, kid2.text).to.equal(201);
    expect(kid2.json.warning, 'the second new VM cold-booted').to.equal(undefined);
    const inKid2 = await d.call(
      'POST',
      `/vms/snapkid2/exec?${qs({ cmd: 'sh', args: ['-c', `cat /root/snap-a; ${cmd(pidA)}; hostname`] })}`,
    );
    expect(
      inKid2.json.stdout
        .trim()
        .split('\n')
        .map((l: string) => l.trim()),
    ).to.deep.equal(['one', 'sleep 100000', 'snapkid2']);
    expect(kinds().sort(), live().join(' ')).to.deep.equal(['dev', 'ram']);
    expect((await d.call('DELETE', '/vms/snapkid2')).status).to.equal(200);
    // A suspended VM's snapshot holds its saved state: a revert resumes the guest as it was saved.
    expect((await d.call('POST', '/vms/main/suspend')).status).to.equal(200);
    const asleep = await d.call('POST', '/vms/main/snapshots', { name: 'asleep' });
    expect(asleep.json).to.include({ memory: true, taken_from: 'suspended' });
    expect((await d.call('GET', '/vms/main')).json.status).to.equal('suspended');
    expect((await d.call('POST', '/vms/main/restore')).json.status).to.equal('running');
    await sh('echo later > /root/snap-c; sync');
    const woke = await d.call('POST', '/vms/main/snapshots/asleep/revert');
    expect(woke.json).to.include({ status: 'running' });
    expect(woke.json.warning).to.equal(undefined);
    expect(await sh(`test -e /root/snap-c && echo c-kept || echo c-gone; ${cmd(pidA)}`)).to.equal(
      'c-gone\nsleep 100000',
    );
  });

  it('survives a daemon restart with VMs running', async () => {
    await d.restart();
    const list = (await d.call('GET', '/vms')).json.map(
      (i: { name: string; status: string }) => `${i.name}:${i.status}`,
    );
    expect(list).to.deep.equal(['eph:running', 'main:running', 'ud:running']);
    expect((await d.call('POST', '/vms/main/exec?cmd=cat&args=/root/kept')).json.stdout).to.equal('kept\n');
    const fwd = (await d.call('GET', '/vms/main')).json.forwards.find((f: { kind: string }) => f.kind === 'live');
    expect(await httpGet(fwd.host_port)).to.equal('hello from the guest\n');
  });

  it('shuts down, edits and starts a persistent VM, keeping its disk; an ephemeral one is removed', async () => {
    const script = 'nproc; df -k / | tail -1; grep MemTotal /proc/meminfo';
    const shape = async () =>
      (await d.call('POST', `/vms/main/exec?cmd=sh&args=-c&args=${encodeURIComponent(script)}`)).json.stdout
        .trim()
        .split('\n');
    const [cpusBefore, dfBefore, memBefore] = await shape();
    const was = (await d.call('GET', '/vms/main')).json;
    const grown = { cpus: was.cpus + 1, memory_mb: was.memory_mb + 64, disk_gb: was.disk_gb + 1 };
    const running = await d.call('PATCH', '/vms/main', grown);
    expect(running.status, running.text).to.equal(400);
    expect(running.json.error).to.match(/while it is stopped/);
    expect((await d.call('POST', '/vms/main/shutdown')).json.message).to.equal('vm main shut down');
    expect(qemuProcesses(d.config.data_dir, ['main'])).to.deep.equal([]);
    const cold = await d.call('POST', '/vms/main/snapshots', { name: 'cold' });
    expect(cold.json).to.include({ name: 'cold', memory: false, taken_from: 'stopped', cpus: was.cpus });
    const edited = await d.call('PATCH', '/vms/main', grown);
    expect(edited.status, edited.text).to.equal(200);
    expect(edited.json).to.include({ ...grown, status: 'stopped' });
    const started = await d.call('POST', '/vms/main/start');
    expect(started.status, started.text).to.equal(200);
    expect(started.json.status).to.equal('running');
    expect((await d.call('POST', '/vms/main/exec?cmd=cat&args=/root/kept')).json.stdout).to.equal('kept\n');
    // The guest has the new shape: one more vCPU, more memory, and its root filesystem grown into the disk.
    const [cpusAfter, dfAfter, memAfter] = await shape();
    expect(Number(cpusAfter)).to.equal(Number(cpusBefore) + 1);
    const kb = (line: string) => Number(line.split(/\s+/)[1]);
    expect(kb(dfAfter) - kb(dfBefore), `${dfBefore} -> ${dfAfter}`).to.be.above(900 * 1024);
    expect((kb(memAfter) - kb(memBefore)) / 1024, `${memBefore} -> ${memAfter}`).to.be.within(48, 72);
    // Back to the snapshot taken before the edit: its disk and its shape, the VM left stopped.
    await d.call('POST', `/vms/main/exec?${qs({ cmd: 'sh', args: ['-c', 'echo x > /root/after-edit; sync'] })}`);
    const reverted = await d.call('POST', '/vms/main/snapshots/cold/revert');
    expect(reverted.json).to.include({
      status: 'stopped',
      cpus: was.cpus,
      memory_mb: was.memory_mb,
      disk_gb: was.disk_gb,
    });
    expect(qemuProcesses(d.config.data_dir, ['main'])).to.deep.equal([]);
    expect((await d.call('POST', '/vms/main/start')).json.status).to.equal('running');
    const [cpusBack] = await shape();
    expect(cpusBack).to.equal(cpusBefore);
    const files = await d.call('POST', `/vms/main/exec?${qs({ cmd: 'sh', args: ['-c', 'cat /root/kept; ls /root'] })}`);
    expect(files.json.stdout).to.match(/^kept\n/);
    expect(files.json.stdout).to.not.match(/after-edit/);
    expect((await d.call('POST', '/vms/eph/shutdown')).json.message).to.match(/removed/);
    expect((await d.call('GET', '/vms/eph')).status).to.equal(404);
    expect(existsSync(join(d.config.data_dir, 'vms', 'eph'))).to.equal(false);
  });

  it('marks a VM whose QEMU is killed from outside as error', async () => {
    const [line] = qemuProcesses(d.config.data_dir, ['ud']);
    process.kill(Number(line.trim().split(/\s+/)[0]), 'SIGKILL');
    let inst;
    for (let i = 0; i < 50; i++) {
      inst = (await d.call('GET', '/vms/ud')).json;
      if (inst.status === 'error') break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(inst.status).to.equal('error');
    expect(inst.error).to.match(/unexpectedly/);
  });

  it('deletes everything and leaves no QEMU process or VM directory behind', async () => {
    for (const n of ['main', 'ud']) expect((await d.call('DELETE', `/vms/${n}`)).status).to.equal(200);
    expect(qemuProcesses(d.config.data_dir, names)).to.deep.equal([]);
    expect(readdirSync(join(d.config.data_dir, 'vms'))).to.deep.equal([]);
    const activity = (await d.call('GET', '/activity')).json.events.map((e: { action: string }) => e.action);
    expect(activity).to.include.members(['create', 'suspend', 'restore', 'shutdown', 'start', 'crash', 'delete']);
    expect(readFileSync(join(d.config.data_dir, 'activity.json'), 'utf8')).not.to.contain('e2e-secret-value');
  });
});

function httpGet(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    request({ host: '127.0.0.1', port, path: '/' }, (res) => {
      let s = '';
      res.on('data', (c) => (s += c));
      res.on('end', () => resolve(s));
    })
      .on('error', reject)
      .end();
  });
}

function rawGet(d: TestDaemon, path: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    request({ socketPath: d.config.socket, path, headers: { authorization: 'Bearer test-token' } }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => resolve(Buffer.concat(parts)));
    })
      .on('error', reject)
      .end();
  });
}
