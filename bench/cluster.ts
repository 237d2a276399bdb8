// BENCH_ONLY=cluster: three svcd nodes (the fake hypervisor; n3 with real local agents) on a
// three-member etcd, in one run (docs/cluster.md): an exec and a copy through a node that does not
// own the VM against its owner directly, creates placed on three nodes against one, and what each
// VM operation writes to etcd (revisions) and so sends to every node's watch.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { freePort } from '../src/adapters/hypervisor/free-port.js';
import { nodeConfig, startEtcd } from '../test/helpers/etcd.js';
import { fmt, pump, startSvcd, stats, type Daemon, type Row } from './lib.js';

const ROUNDS = Number(process.env.BENCH_CLUSTER_ROUNDS ?? 300);
const COPY_MB = Number(process.env.BENCH_CLUSTER_COPY_MB ?? 256);
const CREATES = Number(process.env.BENCH_CLUSTER_CREATES ?? 60);
const TOKEN = 'bench-user-token';

/** One call with a JSON body (when given) on a kept-alive agent; the status and the text. */
function send(
  agent: Agent,
  port: number,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const req = request(
      {
        agent,
        host: '127.0.0.1',
        port,
        method,
        path,
        headers: {
          authorization: `Bearer ${TOKEN}`,
          ...(payload ? { 'content-type': 'application/json', 'content-length': String(payload.length) } : {}),
        },
      },
      (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/** PUT of `mb` MiB to /vms/g/cp on `port`; MiB/s. */
function copy(port: number, path: string, mb: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'PUT',
        path: `/vms/g/cp?path=${encodeURIComponent(path)}`,
        headers: {
          authorization: `Bearer ${TOKEN}`,
          'content-type': 'application/octet-stream',
          'content-length': String(mb << 20),
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => {
          if ((res.statusCode ?? 0) >= 300) return reject(new Error(`copy answered ${res.statusCode}`));
          resolve(mb / (Number(process.hrtime.bigint() - t0) / 1e9));
        });
      },
    );
    req.on('error', reject);
    pump(req, Buffer.alloc(1 << 20, 7), mb << 20);
  });
}

export async function clusterBenchmarks(row: Row, results: Record<string, unknown>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-cluster-'));
  const etcd = await startEtcd(join(dir, 'etcd'));
  const nodes: Daemon[] = [];
  const ports: number[] = [];
  const kv = new Etcd3({ hosts: etcd.endpoints });
  try {
    for (const name of ['n1', 'n2', 'n3']) {
      const port = await freePort('tcp');
      ports.push(port);
      mkdirSync(join(dir, name));
      nodes.push(
        await startSvcd(
          join(dir, name),
          nodeConfig(
            { dir: join(dir, name), port, node: name, etcd, token: TOKEN },
            {
              hypervisor: 'fake',
              test_mode: true,
              fake: { boot_delay: '20ms', agent: name === 'n3' },
              build_default_image: false,
            },
            {
              vm_slots: name === 'n3' ? 2 : 1000,
              cpus: 1000,
              memory_mb: 1_000_000,
              disk_gb: 100_000,
              tags: [`only=${name}`],
            },
          ),
        ),
      );
    }
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const call = (port: number, method: string, path: string, body?: unknown) => send(agent, port, method, path, body);
    // Read once what an operation published has landed (a shutdown's last change is published after it answers).
    const revision = async () => {
      await new Promise((r) => setTimeout(r, 300));
      return Number((await kv.get('/svc/none').exec()).header.revision);
    };

    // What one VM operation writes to etcd (each write is one event on every node's watch).
    const r0 = await revision();
    await call(ports[0], 'POST', '/vms', { name: 'w', persistent: true, node: 'n1' });
    const r1 = await revision();
    await call(ports[0], 'POST', '/vms/w/shutdown');
    const r2 = await revision();
    await call(ports[0], 'POST', '/vms/w/start');
    const r3 = await revision();
    await call(ports[0], 'DELETE', '/vms/w');
    const r4 = await revision();
    const writes = { create: r1 - r0, shutdown: r2 - r1, start: r3 - r2, delete: r4 - r3 };
    row(
      'etcd writes per VM operation (create, shutdown, start, delete), each one watch event on every node',
      `${writes.create}, ${writes.shutdown}, ${writes.start}, ${writes.delete}`,
      '',
    );

    // Exec through a node that does not own the VM against its owner, interleaved.
    const made = await call(ports[0], 'POST', '/vms', { name: 'g', node: 'n3' });
    if (made.status !== 201) throw new Error(`create g: ${made.status} ${made.text}`);
    const lat: Record<'direct' | 'proxied', number[]> = { direct: [], proxied: [] };
    for (let i = 0; i < ROUNDS + 20; i++)
      for (const which of i % 2 ? (['direct', 'proxied'] as const) : (['proxied', 'direct'] as const)) {
        const t0 = process.hrtime.bigint();
        const r = await call(which === 'direct' ? ports[2] : ports[0], 'POST', '/vms/g/exec?cmd=true');
        if (r.status !== 200) throw new Error(`exec ${which}: ${r.status} ${r.text}`);
        if (i >= 20) lat[which].push(Number(process.hrtime.bigint() - t0) / 1e6);
      }
    const [d, p] = [stats(lat.direct), stats(lat.proxied)];
    row(`exec (true) on the owner node directly, p50 / p95 of ${ROUNDS}`, `${fmt(d.p50, 2)} / ${fmt(d.p95, 2)} ms`, '');
    row(
      'the same through a node that does not own the VM',
      `${fmt(p.p50, 2)} / ${fmt(p.p95, 2)} ms`,
      `+${fmt(p.p50 - d.p50, 2)} ms at p50 (target <= +1 ms: ${p.p50 - d.p50 <= 1 ? 'met' : 'missed'})`,
    );

    const target = join(dir, 'copied.bin');
    const mbps: Record<'direct' | 'proxied', number[]> = { direct: [], proxied: [] };
    for (let i = 0; i < 3; i++)
      for (const which of i % 2 ? (['direct', 'proxied'] as const) : (['proxied', 'direct'] as const))
        mbps[which].push(await copy(which === 'direct' ? ports[2] : ports[0], target, COPY_MB));
    const [cd, cp] = [stats(mbps.direct).p50, stats(mbps.proxied).p50];
    row(`copy of ${COPY_MB} MiB into the VM on its owner directly (median of 3)`, `${fmt(cd, 0)} MiB/s`, '');
    row(
      'the same through a node that does not own the VM',
      `${fmt(cp, 0)} MiB/s`,
      `${fmt((cp / cd) * 100, 0)}% of direct (target >= 90%: ${cp / cd >= 0.9 ? 'met' : 'missed'})`,
    );

    // Creates placed on one node against three, 10 at a time, through n1.
    const createRate = async (prefix: string, selector?: Record<string, string>) => {
      const many = new Agent({ keepAlive: true, maxSockets: 10 });
      const t0 = Date.now();
      let next = 0;
      const worker = async () => {
        while (next < CREATES) {
          const i = next++;
          const r = await send(many, ports[0], 'POST', '/vms', {
            name: `${prefix}${i}`,
            memory_mb: 256,
            ...(selector ? { node_selector: selector } : {}),
          });
          if (r.status !== 201) throw new Error(`create ${prefix}${i}: ${r.status} ${r.text}`);
        }
      };
      await Promise.all(Array.from({ length: 10 }, worker));
      const rate = CREATES / ((Date.now() - t0) / 1000);
      many.destroy();
      return rate;
    };
    const one = await createRate('one', { only: 'n1' });
    const three = await createRate('all');
    row(`creates (fake hypervisor, ${CREATES}, 10 at a time through n1) placed on one node`, `${fmt(one, 1)} /s`, '');
    row('the same placed on three nodes by the rule', `${fmt(three, 1)} /s`, `${fmt(three / one, 2)}x one node`);
    results.cluster = {
      rounds: ROUNDS,
      etcd_writes: writes,
      exec_ms: { direct: d, proxied: p },
      copy_mib_s: mbps,
      copy_mb: COPY_MB,
      creates: CREATES,
      creates_per_s: { one_node: one, three_nodes: three },
    };
    agent.destroy();
  } finally {
    kv.close();
    for (const n of nodes) await n.stop();
    await etcd.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
