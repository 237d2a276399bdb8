import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { call } from '../helpers/http.js';
import { tempDir } from '../helpers/daemon.js';

const SVCD = fileURLToPath(new URL('../../src/bin/svcd.js', import.meta.url));
const SIZE = 256 * 1024 * 1024;

/** Names of the processes whose parent is `pid` (from /proc). */
function childrenOf(pid: number): string[] {
  const names: string[] = [];
  for (const p of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      const m = /^\d+ \((.*)\) \S (\d+)/.exec(stat);
      if (m && Number(m[2]) === pid) names.push(m[1]);
    } catch {
      // gone meanwhile
    }
  }
  return names;
}

describe('cp through a svcd process: streamed, not buffered', function () {
  this.timeout(120000);
  let daemon: ChildProcess;
  let socket: string;
  // The fake hypervisor's agent runs on this host, so the "guest" path is a host one.
  const guestPath = join(tmpdir(), `svc-bigcp-${process.pid}.bin`);

  before(async () => {
    const dir = tempDir('svc-bigcp-');
    const cfg = join(dir, 'config.yaml');
    socket = join(dir, 'svc.sock');
    writeFileSync(
      cfg,
      `data_dir: ${dir}/data\nsocket: ${socket}\napi: ''\nhypervisor: fake\nfake_agent: true\ntest_mode: true\nlog_level: warn\n`,
    );
    daemon = spawn(process.execPath, [SVCD, '--config', cfg], { stdio: ['ignore', 'ignore', 'inherit'] });
    for (let i = 0; i < 100; i++) {
      const ok = await call({ socketPath: socket }, 'GET', '/healthz').then(
        () => true,
        () => false,
      );
      if (ok) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect((await call({ socketPath: socket }, 'POST', '/vms', { name: 'big' })).status).to.equal(201);
  });
  after(() => {
    daemon.kill('SIGTERM');
    rmSync(guestPath, { force: true });
  });

  it('moves 256 MiB both ways byte-exact, both through the splice helper, while the daemon stays far below that in memory', async () => {
    const hash = createHash('sha256');
    const chunk = randomBytes(1024 * 1024);
    const upHelpers = new Set<string>();
    await new Promise<void>((resolve, reject) => {
      const req = request(
        {
          socketPath: socket,
          method: 'PUT',
          path: `/vms/big/cp?path=${guestPath}`,
          headers: { 'content-type': 'application/octet-stream', 'content-length': String(SIZE) },
        },
        (res) => {
          res.resume();
          res.on('end', () => (res.statusCode === 204 ? resolve() : reject(new Error(`PUT ${res.statusCode}`))));
        },
      );
      req.on('error', reject);
      let sent = 0;
      const pump = () => {
        while (sent < SIZE) {
          const c = Buffer.from(chunk);
          c.writeUInt32LE(sent / chunk.length, 0);
          hash.update(c);
          sent += c.length;
          if (sent % (16 << 20) === 0) for (const n of childrenOf(daemon.pid!)) upHelpers.add(n);
          if (!req.write(c)) return void req.once('drain', pump);
        }
        req.end();
      };
      pump();
    });
    expect([...upHelpers], 'the upload went through svc-splice').to.include('svc-splice');
    const back = createHash('sha256');
    let got = 0;
    const helpers = new Set<string>();
    const keep = new Agent({ keepAlive: true, maxSockets: 1 });
    await new Promise<void>((resolve, reject) => {
      request({ socketPath: socket, agent: keep, path: `/vms/big/cp?path=${guestPath}` }, (res) => {
        expect(res.statusCode).to.equal(200);
        res.on('data', (c: Buffer) => {
          back.update(c);
          // Every 16 MiB or so: is the daemon's splice helper moving the bytes?
          if (Math.floor((got + c.length) / (16 << 20)) !== Math.floor(got / (16 << 20)))
            for (const n of childrenOf(daemon.pid!)) helpers.add(n);
          got += c.length;
        });
        res.on('end', resolve);
        res.on('error', reject);
      }).end();
    });
    expect(got).to.equal(SIZE);
    expect(back.digest('hex')).to.equal(hash.digest('hex'));
    expect([...helpers], 'the download went through svc-splice (native/svc-splice.c)').to.include('svc-splice');
    // The connection the download was spliced into goes on serving requests (keep-alive).
    const next = await new Promise<{ status: number; reused: boolean }>((resolve, reject) => {
      const r = request({ socketPath: socket, agent: keep, path: '/vms/big' }, (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0, reused: r.reusedSocket }));
      });
      r.on('error', reject);
      r.setTimeout(5000, () => r.destroy(new Error('no answer on the kept connection')));
      r.end();
    });
    keep.destroy();
    expect(next).to.deep.equal({ status: 200, reused: true });
    const hwm = Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${daemon.pid}/status`, 'utf8'))![1]) * 1024;
    expect(hwm, `svcd peak RSS ${Math.round(hwm / 1048576)} MiB`).to.be.below(SIZE / 2);
  });
});
