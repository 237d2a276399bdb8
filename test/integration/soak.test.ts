import { expect } from 'chai';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { join } from 'node:path';
import { tempDir } from '../helpers/daemon.js';
import { spawnSvcd } from '../helpers/svcd-process.js';
import { LIVE_HEAP_ARGS, LiveHeap } from '../helpers/live-heap.js';
import { poll } from '../helpers/wait.js';

const SECONDS = Number(process.env.SVC_SOAK_SECONDS ?? 60);
const CLIENTS = 200;
const VMS = 8;

const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
const fds = (pid: number) => readdirSync(`/proc/${pid}/fd`).length;
const fdTargets = (pid: number) =>
  readdirSync(`/proc/${pid}/fd`).map((f) => {
    try {
      return readlinkSync(`/proc/${pid}/fd/${f}`);
    } catch {
      return '?';
    }
  });
const pct = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(q * (s.length - 1) + 0.5))] : NaN;
};

/**
 * 200 concurrent clients of mixed list/get/exec/cp (and 4 that create and delete VMs) against a svcd process on the fake
 * hypervisor with real local agents, for SVC_SOAK_SECONDS (60 in CI, three rounds): every request
 * that should succeed does, p50/p99 per route are printed, the daemon's open files come back to
 * their baseline after each round, and its live heap does not keep growing after the first round.
 */
describe(`soak: ${CLIENTS} concurrent clients for ${SECONDS} s (fake hypervisor, real local agents)`, function () {
  this.timeout((SECONDS + 120) * 1000);

  it('fails no request that should succeed, and returns to its baseline', async () => {
    const dir = tempDir('svc-soak-');
    const socket = join(dir, 'svc.sock');
    // Caps above the client count: a slow agent lets execs pile up on one VM, and 429 there would be
    // the cap doing its job (tested in guest-limits), not a failure of the daemon under load.
    const raw = {
      data_dir: join(dir, 'data'),
      socket,
      api: '',
      hypervisor: 'fake',
      fake_agent: true,
      test_mode: true,
      fake_boot_delay: '10ms',
      log_level: 'warn',
      sandbox_metrics_enabled: false,
      max_execs_per_vm: 256,
      max_execs_total: 512,
    };
    const svcd = await spawnSvcd(dir, raw, { nodeArgs: LIVE_HEAP_ARGS });
    const proc = svcd.proc;
    let heap: LiveHeap | undefined;
    const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
    const req = (method: string, path: string, body?: Buffer | string, type = 'application/json') =>
      new Promise<{ status: number; text: string }>((resolve, reject) => {
        const r = request(
          {
            agent,
            socketPath: socket,
            method,
            path,
            headers:
              body === undefined ? {} : { 'content-type': type, 'content-length': String(Buffer.byteLength(body)) },
          },
          (res) => {
            const parts: Buffer[] = [];
            res.on('data', (c: Buffer) => parts.push(c));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(parts).toString() }));
            res.on('error', reject);
          },
        );
        r.on('error', reject);
        r.end(body);
      });
    try {
      const live = await LiveHeap.attach(svcd.stderr);
      heap = live;
      for (let i = 0; i < VMS; i++) {
        const made = await req('POST', '/vms', JSON.stringify({ name: `s${i}`, persistent: true }));
        expect(made.status, made.text).to.equal(201);
      }
      await new Promise((r) => setTimeout(r, 500));
      const base = { rss: rssMiB(proc.pid!), fds: fds(proc.pid!), heap: await live.mib() };
      const baseTargets = fdTargets(proc.pid!);
      const lat: Record<string, number[]> = {};
      const failures: string[] = [];
      let made = 0;
      let end = 0;
      const client = async (c: number) => {
        for (let n = 0; Date.now() < end; n++) {
          const vm = `s${(c + n) % VMS}`;
          // 4 of the clients create and delete VMs (each fake VM starts a real agent process and an
          // SSH server on this host); the others list, get, exec and copy
          const roll = c % 50 === 0 ? 99 : (c * 7919 + n * 104729) % 97;
          const t0 = performance.now();
          let route: string;
          let ok: boolean;
          let r: { status: number; text: string };
          if (roll < 30) {
            route = 'GET /vms';
            r = await req('GET', '/vms');
            ok = r.status === 200;
          } else if (roll < 50) {
            route = 'GET /vms/{name}';
            r = await req('GET', `/vms/${vm}`);
            ok = r.status === 200;
          } else if (roll < 80) {
            route = 'POST exec';
            r = await req('POST', `/vms/${vm}/exec?cmd=echo&args=${c}-${n}`);
            ok = r.status === 200 && JSON.parse(r.text).stdout === `${c}-${n}\n`;
          } else if (roll < 97) {
            route = 'PUT+GET cp';
            const path = join(dir, 'data', 'vms', vm, 'guest', `f-${c}.txt`);
            const up = await req(
              'PUT',
              `/vms/${vm}/cp?path=${encodeURIComponent(path)}`,
              `${c}:${n}`,
              'application/octet-stream',
            );
            r = await req('GET', `/vms/${vm}/cp?path=${encodeURIComponent(path)}`);
            ok = up.status === 204 && r.status === 200 && r.text === `${c}:${n}`;
            // what failed: the write (its answer), or the read of what was written (`c:n` expected)
            if (!ok)
              r = { status: r.status, text: `PUT ${up.status} ${up.text.slice(0, 150)}; GET of ${c}:${n}: ${r.text}` };
          } else {
            route = 'POST+DELETE vm';
            const name = `e${c}-${n}`;
            r = await req('POST', '/vms', JSON.stringify({ name }));
            const del = r.status === 201 ? await req('DELETE', `/vms/${name}`) : r;
            ok = r.status === 201 && del.status === 200;
            if (ok) made++;
          }
          (lat[route] ??= []).push(performance.now() - t0);
          if (!ok && failures.length < 10) failures.push(`${route} ${vm}: ${r.status} ${r.text.slice(0, 200)}`);
        }
      };
      /** One round of load, then the daemon at rest: kept-alive sockets to agents close after 10 s idle. */
      const round = async () => {
        end = Date.now() + (SECONDS / 3) * 1000;
        await Promise.all(Array.from({ length: CLIENTS }, (_, c) => client(c)));
        agent.destroy();
        await poll(() => fds(proc.pid!) <= base.fds + 4, { ms: 20_000, every: 500 });
        return { rss: rssMiB(proc.pid!), fds: fds(proc.pid!), heap: await live.mib() };
      };
      // The first round brings the daemon to its working size. A leak grows what is live after full
      // collections by what each request leaves. RSS is printed, not checked: it moves with when V8
      // collects and with what the allocator keeps (one CI run saw it grow by 44, then 31 MiB, in
      // the rounds after the first; the live heap, measured in other runs, by a MiB at most).
      const first = await round();
      const second = await round();
      const after = await round();
      const total = Object.values(lat).reduce((n, x) => n + x.length, 0);
      console.log(
        `      soak: ${total} requests in ${SECONDS} s (three rounds) by ${CLIENTS} clients (${made} VMs created and deleted)`,
      );
      for (const [route, xs] of Object.entries(lat).sort())
        console.log(
          `      ${route.padEnd(16)} n=${String(xs.length).padStart(6)}  p50 ${pct(xs, 0.5).toFixed(1)} ms  p99 ${pct(xs, 0.99).toFixed(1)} ms`,
        );
      console.log(
        `      daemon live heap ${[base, first, second, after].map((x) => x.heap.toFixed(1)).join(' -> ')} MiB, RSS ${[base, first, second, after].map((x) => x.rss.toFixed(0)).join(' -> ')} MiB, open files ${base.fds} -> ${first.fds} -> ${second.fds} -> ${after.fds}`,
      );
      expect(failures, failures.join('\n')).to.deep.equal([]);
      expect(made).to.be.above(0);
      const extra = fdTargets(proc.pid!).filter((t) => !baseTargets.includes(t) || t.startsWith('socket:'));
      expect(after.fds, `open files back to the baseline; now open: ${extra.join(', ')}`).to.be.at.most(base.fds + 4);
      expect(first.fds, 'open files back to the baseline after the first round').to.be.at.most(base.fds + 4);
      expect(second.fds, 'open files back to the baseline after the second round').to.be.at.most(base.fds + 4);
      // It grew by 0.4 and 0.7 MiB over these two rounds here; with a string of 2,048 characters
      // kept for each request (tried by hand, about 8,000 requests), by 4.1 MiB.
      expect(
        after.heap - first.heap,
        `the live heap grew from ${first.heap.toFixed(1)} to ${after.heap.toFixed(1)} MiB over two rounds: a leak`,
      ).to.be.below(3);
      const vms = JSON.parse((await req('GET', '/vms')).text) as { name: string }[];
      expect(vms.map((v) => v.name).sort()).to.deep.equal(Array.from({ length: VMS }, (_, i) => `s${i}`).sort());
    } finally {
      agent.destroy();
      heap?.close();
      await svcd.stop();
    }
  });
});
