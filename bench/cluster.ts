// BENCH_ONLY=cluster: three svcd nodes (the fake hypervisor; n3 with real local agents) on a
// three-member etcd, in one run (docs/cluster.md): an exec and a copy through a node that does not
// own the VM against its owner directly (the exec also through a bare Node proxy: the floor of such
// a hop on this host), creates placed on three nodes against one, and what each VM operation
// writes to etcd (revisions) and so sends to every node's watch.
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { Agent, createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Etcd3 } from 'etcd3';
import { freePort } from '../src/adapters/hypervisor/free-port.js';
import { nodeConfig, startEtcd, type TestEtcd } from '../test/helpers/etcd.js';
import { cpuSeconds, fmt, minimalQemu, profiling, pump, startSvcd, stats, type Daemon, type Row } from './lib.js';

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

/**
 * Starts a svcd node per name in `dir/<name>` on `etcd`, each with the config and cluster section
 * `config(name)` gives; pushes each daemon and its port as it starts.
 */
async function startNodes(
  dir: string,
  etcd: TestEtcd,
  names: string[],
  nodes: Daemon[],
  ports: number[],
  config: (name: string) => [Record<string, unknown>, Record<string, unknown>],
): Promise<void> {
  for (const name of names) {
    const port = await freePort('tcp');
    ports.push(port);
    mkdirSync(join(dir, name));
    const [extra, cluster] = config(name);
    nodes.push(
      await startSvcd(
        join(dir, name),
        nodeConfig({ dir: join(dir, name), port, node: name, etcd, token: TOKEN }, extra, cluster),
      ),
    );
  }
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

/** GET of /vms/g/cp (the file at `path`, `mb` MiB) from `port`, read and dropped; MiB/s. */
function download(port: number, path: string, mb: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: `/vms/g/cp?path=${encodeURIComponent(path)}`,
        headers: { authorization: `Bearer ${TOKEN}` },
      },
      (res) => {
        let got = 0;
        res.on('data', (c: Buffer) => (got += c.length));
        res.on('end', () => {
          if (res.statusCode !== 200 || got !== mb << 20)
            return reject(new Error(`download answered ${res.statusCode} with ${got} bytes`));
          resolve(mb / (Number(process.hrtime.bigint() - t0) / 1e9));
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

type Hop = 'direct' | 'proxied' | 'bare';

/** bench/bare-proxy.ts started in front of 127.0.0.1:`target`, once it listens. */
async function startBareProxy(target: number): Promise<{ port: number; pid: number; stop(): void }> {
  const script = fileURLToPath(new URL('./bare-proxy.js', import.meta.url));
  const proc = spawn(process.execPath, [...profiling(), script, String(target)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    proc.stdout!.once('data', (c: Buffer) => resolve(Number(c.toString().trim())));
    proc.once('exit', (code) => reject(new Error(`the bare proxy exited (${code})`)));
  });
  return { port, pid: proc.pid!, stop: () => void proc.kill() };
}

/**
 * The bare proxy's hop with nothing else running: no etcd, no nodes, an owner in this process that
 * answers at once. What one more Node process relaying a call costs on this host with its cores
 * idle, beside the same hop measured among the cluster's processes (which share the two cores).
 */
async function idleHop(): Promise<{ direct: ReturnType<typeof stats>; bare: ReturnType<typeof stats> }> {
  const owner = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"exit_code":0,"stdout":"","stderr":""}');
    });
  });
  await new Promise<void>((resolve) => owner.listen(0, '127.0.0.1', resolve));
  const port = (owner.address() as AddressInfo).port;
  const bare = await startBareProxy(port);
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const lat: Record<'direct' | 'bare', number[]> = { direct: [], bare: [] };
    for (let i = 0; i < ROUNDS + 20; i++)
      for (const which of i % 2 ? (['direct', 'bare'] as const) : (['bare', 'direct'] as const)) {
        const t0 = process.hrtime.bigint();
        const r = await send(agent, which === 'direct' ? port : bare.port, 'POST', '/vms/g/exec?cmd=true');
        if (r.status !== 200) throw new Error(`idle hop ${which}: ${r.status} ${r.text}`);
        if (i >= 20) lat[which].push(Number(process.hrtime.bigint() - t0) / 1e6);
      }
    return { direct: stats(lat.direct), bare: stats(lat.bare) };
  } finally {
    agent.destroy();
    bare.stop();
    owner.close();
  }
}

export async function clusterBenchmarks(row: Row, results: Record<string, unknown>): Promise<void> {
  // First, with nothing else running yet.
  const idle = await idleHop();
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-cluster-'));
  const etcd = await startEtcd(join(dir, 'etcd'));
  const nodes: Daemon[] = [];
  const ports: number[] = [];
  const kv = new Etcd3({ hosts: etcd.endpoints });
  try {
    await startNodes(dir, etcd, ['n1', 'n2', 'n3'], nodes, ports, (name) => [
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
    ]);
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
    // A bare Node proxy in a process of its own in front of the owner (bench/bare-proxy.ts): the
    // least one more process relaying the call costs on this host, measured in the same rounds.
    const bare = await startBareProxy(ports[2]);
    try {
      const lat: Record<Hop, number[]> = { direct: [], proxied: [], bare: [] };
      const hopPort: Record<Hop, number> = { direct: ports[2], proxied: ports[0], bare: bare.port };
      const order: Hop[][] = [
        ['proxied', 'direct', 'bare'],
        ['direct', 'bare', 'proxied'],
        ['bare', 'proxied', 'direct'],
      ];
      // CPU of the proxying node beyond an idle node's (n2's: its lease, its watch), and of the bare proxy.
      const cpuNow = () => [cpuSeconds(nodes[0].proc.pid!), cpuSeconds(nodes[1].proc.pid!), cpuSeconds(bare.pid)];
      let cpu0: number[] = [];
      for (let i = 0; i < ROUNDS + 20; i++) {
        if (i === 20) cpu0 = cpuNow();
        for (const which of order[i % 3]) {
          const t0 = process.hrtime.bigint();
          const r = await call(hopPort[which], 'POST', '/vms/g/exec?cmd=true');
          if (r.status !== 200) throw new Error(`exec ${which}: ${r.status} ${r.text}`);
          if (i >= 20) lat[which].push(Number(process.hrtime.bigint() - t0) / 1e6);
        }
      }
      const cpu1 = cpuNow();
      const perCall = (k: number) => ((cpu1[k] - cpu0[k]) / ROUNDS) * 1000;
      const cpuMs = { proxying_node: perCall(0) - perCall(1), bare_proxy: perCall(2) };
      const [d, p, b] = [stats(lat.direct), stats(lat.proxied), stats(lat.bare)];
      row(
        `exec (true) on the owner node directly, p50 / p95 of ${ROUNDS}`,
        `${fmt(d.p50, 2)} / ${fmt(d.p95, 2)} ms`,
        '',
      );
      row(
        'the same through a node that does not own the VM',
        `${fmt(p.p50, 2)} / ${fmt(p.p95, 2)} ms`,
        `+${fmt(p.p50 - d.p50, 2)} ms at p50 (target <= +1 ms: ${p.p50 - d.p50 <= 1 ? 'met' : 'missed'})`,
      );
      row(
        'the same through a bare Node proxy in a process of its own (no svc code)',
        `${fmt(b.p50, 2)} / ${fmt(b.p95, 2)} ms`,
        `+${fmt(b.p50 - d.p50, 2)} ms at p50: the floor of a hop through one more Node process here`,
      );
      row(
        'CPU per call: the proxying node (beyond an idle node) / the bare proxy',
        `${fmt(cpuMs.proxying_node, 2)} / ${fmt(cpuMs.bare_proxy, 2)} ms`,
        `${fmt(cpuMs.proxying_node / cpuMs.bare_proxy, 2)}x`,
      );
      row(
        'the bare proxy in front of an owner that answers at once, nothing else running (no etcd, no nodes)',
        `${fmt(idle.bare.p50, 2)} / ${fmt(idle.direct.p50, 2)} ms at p50`,
        `+${fmt(idle.bare.p50 - idle.direct.p50, 2)} ms: the same hop on this host with its cores idle`,
      );
      results.cluster = {
        exec_ms: { direct: d, proxied: p, bare_proxy: b },
        exec_cpu_ms_per_call: cpuMs,
        idle_hop_ms: { direct: idle.direct, bare_proxy: idle.bare },
      };
    } finally {
      bare.stop();
    }

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

    const down: Record<'direct' | 'proxied', number[]> = { direct: [], proxied: [] };
    for (let i = 0; i < 3; i++)
      for (const which of i % 2 ? (['direct', 'proxied'] as const) : (['proxied', 'direct'] as const))
        down[which].push(await download(which === 'direct' ? ports[2] : ports[0], target, COPY_MB));
    const [dd, dp] = [stats(down.direct).p50, stats(down.proxied).p50];
    row(`copy of ${COPY_MB} MiB out of the VM from its owner directly (median of 3)`, `${fmt(dd, 0)} MiB/s`, '');
    row(
      'the same through a node that does not own the VM',
      `${fmt(dp, 0)} MiB/s`,
      `${fmt((dp / dd) * 100, 0)}% of direct`,
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
      ...(results.cluster as object),
      rounds: ROUNDS,
      etcd_writes: writes,
      copy_mib_s: mbps,
      download_mib_s: down,
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

/**
 * BENCH_ONLY=moves: two svcd nodes on real QEMU (minimal guests of 512 MB) on one etcd, in one
 * run (docs/cluster.md, "Moving a VM"): a suspended VM moved from one node to the other and back,
 * with the bytes it carries, and its restore there against a suspend and restore on one node; a
 * stopped VM moved, and its boot there.
 */
export async function moveBenchmarks(row: Row, results: Record<string, unknown>): Promise<void> {
  const rounds = Number(process.env.BENCH_MOVE_ROUNDS ?? 3);
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-moves-'));
  const etcd = await startEtcd(join(dir, 'etcd'), 1);
  const nodes: Daemon[] = [];
  const ports: number[] = [];
  try {
    await startNodes(dir, etcd, ['q1', 'q2'], nodes, ports, () => [minimalQemu({ memory_mb: 512 }), {}]);
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const call = async (method: string, path: string, body?: unknown) => {
      const r = await send(agent, ports[0], method, path, body);
      if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${r.text}`);
      return JSON.parse(r.text || '{}') as Record<string, unknown>;
    };
    const timed = async (f: () => Promise<unknown>) => {
      const t0 = performance.now();
      await f();
      return performance.now() - t0;
    };
    const stats_ = (node: string, vm: string) =>
      readdirSync(join(dir, node, 'data', 'vms', vm))
        .filter((f) => f !== 'instance.json')
        .map((f) => statSync(join(dir, node, 'data', 'vms', vm, f)));
    const bytes = (node: string, vm: string) => stats_(node, vm).reduce((n, s) => n + s.size, 0);
    // What its files hold on disk: a RAM image's holes take none, and a move does not send them.
    const allocated = (node: string, vm: string) =>
      stats_(node, vm).reduce((n, s) => n + Math.min(s.size, s.blocks * 512), 0);
    await call('POST', '/vms', { name: 'm', node: 'q1', persistent: true });
    const move: number[] = [];
    const restoreThere: number[] = [];
    const restoreHere: number[] = [];
    const suspendHere: number[] = [];
    let carried = 0;
    let data = 0;
    for (let i = 0; i < rounds; i++) {
      suspendHere.push(await timed(() => call('POST', '/vms/m/suspend')));
      restoreHere.push(await timed(() => call('POST', '/vms/m/restore')));
      await call('POST', '/vms/m/suspend');
      const [from, to] = i % 2 ? ['q2', 'q1'] : ['q1', 'q2'];
      carried = bytes(from, 'm');
      data = allocated(from, 'm');
      move.push(await timed(() => call('POST', '/vms/m/move', { node: to })));
      restoreThere.push(await timed(() => call('POST', '/vms/m/restore')));
    }
    const [mv, rt, rh, sh] = [stats(move), stats(restoreThere), stats(restoreHere), stats(suspendHere)];
    row(
      `move a suspended guest (512 MB, TCG) to the other node, p50 of ${rounds}`,
      `${fmt(mv.p50, 0)} ms (files of ${fmt(carried / 2 ** 20, 0)} MiB holding ${fmt(data / 2 ** 20, 0)} MiB: ${fmt(data / 2 ** 20 / (mv.p50 / 1000), 0)} MiB/s)`,
      `its suspend on one node p50 ${fmt(sh.p50, 0)} ms`,
    );
    row(
      '  its restore there, p50',
      `${fmt(rt.p50, 0)} ms`,
      `a restore on the node it was suspended on p50 ${fmt(rh.p50, 0)} ms (${fmt(rt.p50 / rh.p50, 2)}x)`,
    );
    // A running guest moved in one call (suspended, carried, restored there): its time away, and
    // then an exec's answer from it on its new node.
    const live: number[] = [];
    const firstExec: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const to = (await call('GET', '/vms/m')).node === 'q1' ? 'q2' : 'q1';
      live.push(await timed(() => call('POST', '/vms/m/move', { node: to })));
      firstExec.push(await timed(() => call('POST', '/vms/m/exec?cmd=true')));
    }
    const [lv, fe] = [stats(live), stats(firstExec)];
    row(
      `move a running guest in one call (its time away), p50 of ${rounds}`,
      `${fmt(lv.p50, 0)} ms, then an exec ${fmt(fe.p50, 0)} ms`,
      `its suspend + move + restore as three calls p50 ${fmt(sh.p50 + mv.p50 + rt.p50, 0)} ms (${fmt(lv.p50 / (sh.p50 + mv.p50 + rt.p50), 2)}x)`,
    );
    await call('POST', '/vms/m/shutdown');
    const at = (await call('GET', '/vms/m')).node as string;
    const stoppedBytes = bytes(at, 'm');
    const stoppedMove = await timed(() => call('POST', '/vms/m/move', { node: at === 'q1' ? 'q2' : 'q1' }));
    const bootThere = await timed(() => call('POST', '/vms/m/start'));
    row(
      'move a stopped guest, then its boot there',
      `${fmt(stoppedMove, 0)} ms (${fmt(stoppedBytes / 2 ** 20, 1)} MiB), boot ${fmt(bootThere, 0)} ms`,
      '',
    );
    results.moves = {
      suspended_move_ms: mv,
      carried_bytes: carried,
      carried_allocated_bytes: data,
      restore_after_move_ms: rt,
      restore_same_node_ms: rh,
      suspend_ms: sh,
      running_move_ms: lv,
      exec_after_running_move_ms: fe,
      stopped_move_ms: stoppedMove,
      stopped_bytes: stoppedBytes,
      boot_after_move_ms: bootThere,
    };
    await call('DELETE', '/vms/m');
  } finally {
    for (const n of nodes) await n.stop();
    await etcd.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
