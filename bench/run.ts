// npm run bench: measures what svc promises, each figure beside its peer or limit in the same run,
// prints a table and writes bench/results/<time>.json and bench/results/latest.json.
import { createHash } from 'node:crypto';
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, totalmem, tmpdir } from 'node:os';
import { Agent, request } from 'node:http';
import { createServer, connect } from 'node:net';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
// The tests' image cache (built once, kept by its inputs): a daemon restart mid-run never rebuilds
// the disk its VMs stand on.
import { ensureFixture, ensureImage } from '../test/e2e/image.js';
import { netBenchmarks } from './net.js';
import { processBenchmarks } from './processes.js';
import { codeInterpreterBenchmarks, e2bBenchmarks } from './e2b.js';
import { forkBenchmarks } from './forks.js';
import { vmSnapshotBenchmarks } from './vm-snapshots.js';
import { snapshotCreateBenchmarks } from './snapshot-creates.js';
import { egressSecretBenchmarks } from './egress-secrets.js';
import { clusterBenchmarks, moveBenchmarks } from './cluster.js';
import {
  cpuSeconds,
  diskUse,
  memoryKiB,
  execChannel,
  fetchAll,
  fmt,
  pidListeningOn,
  putBytes,
  type Target,
  post,
  pump,
  REPO,
  resetPeak,
  rounds,
  rssKiB,
  startSvcd,
  stats,
  type Daemon,
  type Stats,
} from './lib.js';

const N = Number(process.env.BENCH_N ?? 5);
const GIB = Number(process.env.BENCH_CP_MIB ?? 1024) * 1024 * 1024;
/** The copy into and out of a TCG guest (about 5 MiB/s each way under TCG, so smaller than the local one). */
const GUEST_CP_MIB = Number(process.env.BENCH_CP_GUEST_MIB ?? 64);
const CP_ROUNDS = Number(process.env.BENCH_CP_ROUNDS ?? 7);
/** How many clones of one template run at once for the disk-sharing row. */
const CLONES = Number(process.env.BENCH_CLONES ?? 20);
const only = (
  process.env.BENCH_ONLY ??
  'boot,debian,exec,cp,net,processes,forks,vm-snapshots,snapshots,egress-secrets,cluster,moves,e2b,code-interpreter,control,memory,import'
).split(',');
const results: Record<string, unknown> = {};
const rows: string[][] = [];
/** A table row, also printed at once, so a long run shows it is alive. */
const row = (...c: (string | number)[]) => {
  rows.push(c.map(String));
  console.log(`bench: ${c.filter((x) => x !== '').join(' | ')}`);
};
/** "(target >= 10x: met)" for a ratio measured in this run. */
const target = (ok: boolean, goal: string) => `(target ${goal}: ${ok ? 'met' : 'missed'})`;
const sign = (n: number) => `${n >= 0 ? '+' : ''}${fmt(n, 2)}`;

async function timeIt(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * One image's guests on QEMU, with a warm pool of `tpl` (suspended or running members) or none.
 * The clones are measured without a pool: a pool of `tpl` fills as soon as `tpl` is suspended,
 * and its clones, boots and saves would run beside the clones being timed.
 */
function qemuSvcd(
  dir: string,
  image: 'minimal' | 'debian',
  n: number,
  pool: 'none' | 'suspended' | 'running',
  extra: Record<string, unknown> = {},
): Promise<Daemon> {
  return startSvcd(dir, {
    create_from_snapshot: false,
    ...extra,
    hypervisor: 'qemu',
    images_dir: ensureImage(image),
    image,
    ...(pool === 'none' ? {} : { warm_pool: { template: 'tpl', size: n, running: pool === 'running' } }),
    sandbox_metrics_enabled: false,
    memory_mb: image === 'debian' ? 512 : 384,
    ready_timeout: '240s',
  });
}

async function poolFull(d: Daemon, n: number): Promise<void> {
  for (let i = 0; i < 1200 && (await d.client.pool()).ready < n; i++) await sleep(500);
}

/**
 * 1. create-to-ready for one image: cold boot vs clone of a suspended template vs pool claim
 * (suspended members, and running members when `running`). Leaves `d` serving that image.
 */
async function bootSeries(
  dir: string,
  d: Daemon,
  image: 'minimal' | 'debian',
  n: number,
  running: boolean,
): Promise<void> {
  const c = d.client;
  const cold: number[] = [];
  for (let i = 0; i < n; i++) {
    cold.push(await timeIt(() => c.create({ name: `cold${i}` })));
    console.log(`boot (${image}): cold boot ${i + 1}/${n} ${fmt(cold[i], 0)} ms`);
    await c.delete(`cold${i}`);
  }
  await c.create({ name: 'tpl', persistent: true });
  await c.suspend('tpl');
  const clone: number[] = [];
  for (let i = 0; i < n; i++) {
    clone.push(await timeIt(() => c.create({ name: `clone${i}`, from: 'tpl' })));
    console.log(
      `boot (${image}): clone ${i + 1}/${n} ${fmt(clone[i], 0)} ms${i === 0 ? ' (the first: no spare qemu yet)' : ''}`,
    );
    await c.delete(`clone${i}`);
  }
  // Clones a second apart, as when each is used a moment before the next: the spare started once
  // the one before answered is up (and warmed) by then. Then each one's first command.
  const spaced = await spacedClones(dir, c, image, n, 'spaced', 'clone a second after the last');
  const shareRow = image === 'minimal' && CLONES > 0 ? await sharedDisk(dir, c) : undefined;
  // The same clones with `clone_spares: false` (each starts its own QEMU), in the same run; each
  // followed by one given a host folder (9p), which no spare serves: added as the guest wakes.
  await d.stop();
  const folder = join(dir, 'clone-share');
  mkdirSync(folder, { recursive: true });
  Object.assign(d, await qemuSvcd(dir, image, n, 'none', { clone_spares: false, mount_dirs: [folder] }));
  const plain: number[] = [];
  const shared: number[] = [];
  for (let i = 0; i < n; i++) {
    plain.push(await timeIt(() => d.client.create({ name: `plain${i}`, from: 'tpl' })));
    await d.client.delete(`plain${i}`);
    const mounts = [{ host: folder, guest: '/mnt/host' }];
    shared.push(await timeIt(() => d.client.create({ name: `shared${i}`, from: 'tpl', mounts })));
    await d.client.delete(`shared${i}`);
    console.log(
      `boot (${image}): clone without spares ${i + 1}/${n} ${fmt(plain[i], 0)} ms, with a host folder ${fmt(shared[i], 0)} ms`,
    );
  }
  // The same clones a second apart with spares that wait held (`clone_spares_warm: false`).
  await d.stop();
  Object.assign(d, await qemuSvcd(dir, image, n, 'none', { clone_spares_warm: false }));
  await d.client.create({ name: 'held-first', from: 'tpl' });
  await d.client.delete('held-first');
  const held = await spacedClones(dir, d.client, image, n, 'held', 'clone a second after the last, held spare');
  // restart so the pool fills from the template, then wait until it is full
  await d.stop();
  Object.assign(d, await qemuSvcd(dir, image, n, 'suspended'));
  await poolFull(d, n);
  // One at a time on a full pool (the pool refilled between claims; each claimed VM deleted, as the
  // cold boots and clones above are, so no claim runs beside idle guests the others left), then a
  // burst back to back that keeps its VMs, as a user who wants n sandboxes at once does.
  const claim: number[] = [];
  for (let i = 0; i < n; i++) {
    claim.push(await timeIt(() => d.client.create({ name: `claim${i}`, from_pool: true })));
    console.log(`boot (${image}): pool claim ${i + 1}/${n} ${fmt(claim[i], 0)} ms`);
    await d.client.delete(`claim${i}`);
    await poolFull(d, n);
  }
  const burst: number[] = [];
  for (let i = 0; i < n; i++) burst.push(await timeIt(() => d.client.create({ name: `burst${i}`, from_pool: true })));
  console.log(`boot (${image}): a burst of ${n} claims ${burst.map((x) => fmt(x, 0)).join(' / ')} ms`);
  for (let i = 0; i < n; i++) await d.client.delete(`burst${i}`);
  const sc = stats(cold);
  const sk = stats(clone);
  const sn = stats(plain);
  const sf = stats(shared);
  const ss = stats(spaced.create);
  const sh = stats(held.create);
  const [fw, fh] = [stats(spaced.firstExec), stats(held.firstExec)];
  const sp = stats(claim);
  const sb = stats(burst);
  const r: Record<string, unknown> = {
    ram_images: process.env.SVC_QEMU_RAM_IMAGES !== 'false',
    cold: sc,
    clone: sk,
    clone_first_ms: clone[0],
    clone_without_spares: sn,
    speedup_clone_without_spares: sc.p50 / sn.p50,
    clone_with_host_folder: sf,
    speedup_clone_with_host_folder: sc.p50 / sf.p50,
    clone_spaced: ss,
    speedup_clone_spaced: sc.p50 / ss.p50,
    clone_spaced_held: sh,
    speedup_clone_spaced_held: sc.p50 / sh.p50,
    first_exec_warm_spare: fw,
    first_exec_held_spare: fh,
    spare_memory_mib: { warm: spaced.spareMiB, held: held.spareMiB },
    pool_claim: sp,
    pool_claim_burst: sb,
    speedup_clone: sc.p50 / sk.p50,
    speedup_claim: sc.p50 / sp.p50,
    speedup_claim_burst: sc.p50 / sb.p50,
    ...(shareRow ? { clones_disk: shareRow } : {}),
  };
  row(`create-to-ready (${image}): cold boot`, `p50 ${fmt(sc.p50, 0)} ms, p95 ${fmt(sc.p95, 0)} ms (n=${n})`, '');
  row(
    `create-to-ready (${image}): clone from snapshot`,
    `p50 ${fmt(sk.p50, 0)} ms, p95 ${fmt(sk.p95, 0)} ms (the first, no spare yet: ${fmt(clone[0], 0)} ms)`,
    `${fmt(sc.p50 / sk.p50)}x faster ${target(sc.p50 / sk.p50 >= 10, '>= 10x')}`,
  );
  row(
    `create-to-ready (${image}): clone a second after the last`,
    `p50 ${fmt(ss.p50, 0)} ms, p95 ${fmt(ss.p95, 0)} ms`,
    `${fmt(sc.p50 / ss.p50)}x faster ${target(sc.p50 / ss.p50 >= 10, '>= 10x')}`,
  );
  row(
    `create-to-ready (${image}): clone a second after the last, held spare`,
    `p50 ${fmt(sh.p50, 0)} ms, p95 ${fmt(sh.p95, 0)} ms (clone_spares_warm: false)`,
    `${fmt(sc.p50 / sh.p50)}x faster; warmed spares save ${fmt(sh.p50 - ss.p50, 0)} ms p50`,
  );
  row(
    `first exec of true after a clone a second apart (${image})`,
    `p50 ${fmt(fw.p50, 0)} ms from a warmed spare`,
    `p50 ${fmt(fh.p50, 0)} ms from a held one`,
  );
  if (spaced.spareMiB && held.spareMiB) {
    // Its own memory is the anonymous part; the rest is mostly pages of the RAM image, page cache the template's clones share.
    const mib = (m: { rss: number; anon: number }) => `own (anonymous) ${fmt(m.anon, 0)} MiB, Rss ${fmt(m.rss, 0)} MiB`;
    row(
      `memory of a spare QEMU waiting for a clone (${image})`,
      `warmed: ${mib(spaced.spareMiB)}`,
      `held: ${mib(held.spareMiB)}`,
    );
  }
  row(
    `create-to-ready (${image}): clone, clone_spares: false`,
    `p50 ${fmt(sn.p50, 0)} ms, p95 ${fmt(sn.p95, 0)} ms`,
    `${fmt(sc.p50 / sn.p50)}x faster; spares save ${fmt(sn.p50 - sk.p50, 0)} ms p50 back to back, ${fmt(sn.p50 - ss.p50, 0)} ms a second apart`,
  );
  row(
    `create-to-ready (${image}): clone given a host folder (9p, added as it wakes)`,
    `p50 ${fmt(sf.p50, 0)} ms, p95 ${fmt(sf.p95, 0)} ms`,
    `${fmt(sc.p50 / sf.p50)}x faster than a boot; ${fmt(sf.p50 - sn.p50, 0)} ms p50 over a clone without spares`,
  );
  row(
    `create-to-ready (${image}): pool claim (suspended members)`,
    `p50 ${fmt(sp.p50, 0)} ms, p95 ${fmt(sp.p95, 0)} ms`,
    `${fmt(sc.p50 / sp.p50)}x faster ${target(sc.p50 / sp.p50 >= 10, '>= 10x')}`,
  );
  row(
    `create-to-ready (${image}): pool claims in a burst (suspended members)`,
    `p50 ${fmt(sb.p50, 0)} ms, p95 ${fmt(sb.p95, 0)} ms`,
    `${fmt(sc.p50 / sb.p50)}x faster ${target(sc.p50 / sb.p50 >= 10, '>= 10x')}`,
  );
  if (running) {
    // The same pool with members kept running: a claim is a rename, forwards and an identity.
    await d.stop();
    Object.assign(d, await qemuSvcd(dir, image, n, 'running'));
    for (const m of (await d.client.pool()).members) if (m.status === 'suspended') await d.client.delete(m.name);
    await d.stop();
    Object.assign(d, await qemuSvcd(dir, image, n, 'running'));
    await poolFull(d, n);
    const hot: number[] = [];
    for (let i = 0; i < n; i++) hot.push(await timeIt(() => d.client.create({ name: `hot${i}`, from_pool: true })));
    const sh = stats(hot);
    Object.assign(r, { pool_claim_running: sh, speedup_claim_running: sc.p50 / sh.p50 });
    row(
      `create-to-ready (${image}): pool claim (running members)`,
      `p50 ${fmt(sh.p50, 0)} ms, p95 ${fmt(sh.p95, 0)} ms`,
      `${fmt(sc.p50 / sh.p50)}x faster ${target(sc.p50 / sh.p50 >= 10, '>= 10x')}`,
    );
  }
  results[image === 'minimal' ? 'create_to_ready_ms' : `create_to_ready_ms_${image}`] = r;
}

/**
 * `n` clones of `tpl` a second apart (the template's spare started after the one before is up by
 * then), each one's first exec of `true` timed after its create, and the memory of the spare that
 * waits after the last (given 3 s to warm up).
 */
async function spacedClones(
  dir: string,
  c: Daemon['client'],
  image: string,
  n: number,
  prefix: string,
  what: string,
): Promise<{ create: number[]; firstExec: number[]; spareMiB?: { rss: number; pss: number; anon: number } }> {
  const create: number[] = [];
  const firstExec: number[] = [];
  for (let i = 0; i < n; i++) {
    await sleep(1000);
    create.push(await timeIt(() => c.create({ name: `${prefix}${i}`, from: 'tpl' })));
    firstExec.push(await timeIt(() => c.exec(`${prefix}${i}`, { cmd: 'true', args: [] })));
    console.log(
      `boot (${image}): ${what} ${i + 1}/${n} ${fmt(create[i], 0)} ms, its first exec ${fmt(firstExec[i], 0)} ms`,
    );
    await c.delete(`${prefix}${i}`);
  }
  await sleep(3000);
  const spare = spareQemu(dir);
  const m = spare ? memoryKiB(spare) : undefined;
  return { create, firstExec, spareMiB: m && { rss: m.rss / 1024, pss: m.pss / 1024, anon: m.anon / 1024 } };
}

/** The pid of a spare QEMU of a template under `dir` (by its process name and pidfile), if one runs. */
function spareQemu(dir: string): number | undefined {
  let out = '';
  try {
    out = execFileSync('pgrep', ['-af', 'process=svc-spare-'], { encoding: 'utf8' });
  } catch {
    return undefined;
  }
  const line = out.split('\n').find((l) => l.includes(`-pidfile ${join(dir, 'data', 'vms')}`));
  return line ? Number(line.split(' ')[0]) : undefined;
}

/**
 * `CLONES` clones of the suspended `tpl` running at once: the disk they take (each file counted
 * once; the template's frozen layer and saved state are shared) beside what as many full copies
 * of the template's disk and state would take.
 */
async function sharedDisk(dir: string, c: Daemon['client']): Promise<Record<string, number>> {
  const names = Array.from({ length: CLONES }, (_, i) => `many${i}`);
  for (const name of names) await c.create({ name, from: 'tpl' });
  const vms = join(dir, 'data', 'vms');
  const use = diskUse(names.map((name) => join(vms, name)));
  // The template's saved state, which every clone loaded (and a full copy would carry).
  // (a stream, or a RAM image's memory file and device state).
  const state = readdirSync(join(vms, 'tpl'))
    .filter((f) => /^base-[0-9a-f]{16}\.(state|ram|dev)$/.test(f))
    .reduce((a, f) => a + lstatSync(join(vms, 'tpl', f)).blocks * 512, 0);
  const own = use.own.reduce((a, b) => a + b, 0) / names.length;
  const shared = use.shared + state;
  const r = {
    clones: names.length,
    shared_bytes: shared,
    own_bytes_per_clone: own,
    bytes_per_clone: (shared + own * names.length) / names.length,
    copy_bytes_per_clone: shared + own,
  };
  row(
    `disk of ${names.length} running clones of one template`,
    `${fmt(r.bytes_per_clone / 2 ** 20)} MiB per clone (own ${fmt(own / 2 ** 20)} MiB + ${fmt(shared / 2 ** 20)} MiB shared once)`,
    `full copies: ${fmt(r.copy_bytes_per_clone / 2 ** 20)} MiB each, ${fmt(r.copy_bytes_per_clone / r.bytes_per_clone)}x more ${target(r.bytes_per_clone < r.copy_bytes_per_clone, 'less than copies')}`,
  );
  // Their QEMUs' memory: Rss counts the pages a clone shares with the others (the RAM image's, in
  // the page cache) in full, Pss splits them among the sharers.
  // By their records: a clone that took its template's spare QEMU runs under the spare's name.
  const pids = names.map(
    (name) =>
      (JSON.parse(readFileSync(join(vms, name, 'instance.json'), 'utf8')) as { runtime: { pid: number } }).runtime.pid,
  );
  const mem = pids.map(memoryKiB);
  const rss = stats(mem.map((m) => m.rss / 1024));
  const pss = stats(mem.map((m) => m.pss / 1024));
  Object.assign(r, { qemu_rss_mib: rss, qemu_pss_mib: pss });
  row(
    `memory of ${names.length} running clones of one template (QEMU, 384 MB guests)`,
    `Pss p50 ${fmt(pss.p50, 0)} MiB per clone`,
    `Rss p50 ${fmt(rss.p50, 0)} MiB (counts shared pages in full)`,
  );
  for (const name of names) await c.delete(name);
  return r;
}

async function removeAll(d: Daemon): Promise<void> {
  for (const i of await d.client.list().catch(() => [])) await d.client.delete(i.name).catch(() => undefined);
  for (const m of (await d.client.pool().catch(() => ({ members: [] as { name: string }[] }))).members)
    await d.client.delete(m.name).catch(() => undefined);
}

/** 1 on debian (the default image): cold boot, clone and pool claim of a debian template. */
async function debianBenchmarks(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-deb-'));
  const n = Number(process.env.BENCH_DEBIAN_N ?? 3);
  const d = await qemuSvcd(dir, 'debian', n, 'none');
  try {
    await bootSeries(dir, d, 'debian', n, false);
  } finally {
    await removeAll(d);
    await d.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * 6. Images people bring: import time of each kind (an OCI archive, the same image as a docker
 * archive, a cloud disk), and create-to-ready of VMs of them beside debian's cold boot, in one run.
 */
async function importBenchmarks(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-import-'));
  const n = Number(process.env.BENCH_IMPORT_N ?? 2);
  const imports = join(dir, 'imports');
  console.log('import: building the fixtures (an OCI archive with umoci, a cloud disk from Debian packages)');
  execFileSync('bash', [join(REPO, 'test', 'e2e', 'fixtures', 'make-oci.sh'), imports], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const disk = ensureFixture('make-cloud-disk.sh', 'qcow2');
  mkdirSync(join(dir, 'd'));
  const d = await startSvcd(join(dir, 'd'), {
    hypervisor: 'qemu',
    images_dir: ensureImage('debian'),
    import_dirs: [imports, join(REPO, '.svc-test', 'fixtures')],
    sandbox_metrics_enabled: false,
    create_from_snapshot: false,
    memory_mb: 1024,
    ready_timeout: '600s',
  });
  const c = d.client;
  const r: Record<string, unknown> = {};
  try {
    for (const [name, from] of [
      ['b-oci', `oci-archive:${imports}/app.oci.tar`],
      ['b-docker', `docker-archive:${imports}/app.docker.tar`],
      ['b-cloud', `disk:${disk}`],
    ]) {
      await c.deleteImage(name).catch(() => undefined);
      const ms = await timeIt(() => c.buildImage({ name, from }));
      r[`import_${name}`] = ms;
      console.log(`import: ${from.split(':')[0]} in ${fmt(ms / 1000)} s`);
      row(
        `import ${from.split(':')[0]}`,
        `${fmt(ms / 1000)} s`,
        name === 'b-cloud' ? '750 MB qcow2 copied' : 'two-layer busybox image',
      );
    }
    const boot = async (label: string, image: string, wait?: string) => {
      const xs: number[] = [];
      for (let i = 0; i < n; i++) {
        xs.push(await timeIt(() => c.create({ name: `bi${i}`, image }, { wait: wait as never, timeout: '900s' })));
        console.log(`import: ${label} create-to-ready ${fmt(xs.at(-1)! / 1000)} s`);
        await c.delete(`bi${i}`);
      }
      return stats(xs);
    };
    const deb = await boot('debian', 'debian');
    const oci = await boot('oci image', 'b-oci');
    const cloud = await boot('cloud disk (ssh)', 'b-cloud');
    const cloudUd = await boot('cloud disk (userdata)', 'b-cloud', 'userdata');
    Object.assign(r, { debian: deb, oci, cloud_ssh: cloud, cloud_userdata: cloudUd });
    row('create-to-ready: debian (cold boot)', `p50 ${fmt(deb.p50, 0)} ms (n=${n})`, '');
    row(
      'create-to-ready: imported OCI image (agent)',
      `p50 ${fmt(oci.p50, 0)} ms`,
      `${fmt(deb.p50 / oci.p50)}x debian's speed`,
    );
    row(
      'create-to-ready: imported cloud disk (wait=ssh)',
      `p50 ${fmt(cloud.p50, 0)} ms`,
      `${fmt(cloud.p50 / deb.p50)}x debian's time`,
    );
    row(
      'create-to-ready: imported cloud disk (wait=userdata)',
      `p50 ${fmt(cloudUd.p50, 0)} ms`,
      `${fmt(cloudUd.p50 / deb.p50)}x debian's time`,
    );
    results.import = r;
  } finally {
    await removeAll(d);
    for (const name of ['b-oci', 'b-docker', 'b-cloud']) await c.deleteImage(name).catch(() => undefined);
    await d.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** 1 on minimal; 2. exec round trip; 5b. QEMU RSS. */
async function qemuBenchmarks(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-'));
  const d = await qemuSvcd(dir, 'minimal', N, 'none');
  try {
    if (only.includes('boot')) await bootSeries(dir, d, 'minimal', N, true);
    const c2 = d.client;
    if (!(await c2.list()).some((i) => i.name === 'ex')) await c2.create({ name: 'ex' });
    if (only.includes('exec')) {
      const inst = await c2.get('ex');
      const agent = new Agent({ keepAlive: true, maxSockets: 1 });
      const path = '/exec?cmd=true';
      const channel = await execChannel(inst.agent_port!);
      const targets = {
        direct: () => post(agent, { port: inst.agent_port }, path),
        direct_channel: () => channel.call('cmd=true&buffered=true'),
        daemon_tcp: () => post(agent, { port: d.port }, `/vms/ex${path}`),
        daemon_unix: () => post(agent, { socketPath: d.socket }, `/vms/ex${path}`),
      };
      for (const f of Object.values(targets)) for (let i = 0; i < 10; i++) await f(); // warm up
      const { samples, paired } = await rounds(targets, 300, 'direct');
      const s = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, stats(v)])) as Record<string, Stats>;
      const tcp = stats(paired.daemon_tcp).p50;
      const unix = stats(paired.daemon_unix).p50;
      // The hop alone: the daemon (which uses the channel) against a direct client of the channel.
      const hop = stats(samples.daemon_unix.map((x, i) => x - samples.direct_channel[i])).p50;
      results.exec_true_ms = {
        ...s,
        overhead_p50_tcp: s.daemon_tcp.p50 - s.direct.p50,
        overhead_p50_unix: s.daemon_unix.p50 - s.direct.p50,
        overhead_paired_p50_tcp: tcp,
        overhead_paired_p50_unix: unix,
        hop_paired_p50_unix_vs_direct_channel: hop,
      };
      row(
        'exec `true` round trip: direct to agent',
        `p50 ${fmt(s.direct.p50, 2)} ms, p95 ${fmt(s.direct.p95, 2)} ms (n=300)`,
        '',
      );
      row(
        "exec `true`: direct on the agent's exec channel",
        `p50 ${fmt(s.direct_channel.p50, 2)} ms, p95 ${fmt(s.direct_channel.p95, 2)} ms`,
        `${sign(stats(paired.direct_channel).p50)} ms paired p50 vs HTTP direct`,
      );
      row(
        'exec `true`: through daemon, TCP',
        `p50 ${fmt(s.daemon_tcp.p50, 2)} ms, p95 ${fmt(s.daemon_tcp.p95, 2)} ms`,
        `${sign(tcp)} ms paired p50 (${sign(s.daemon_tcp.p50 - s.direct.p50)} p50-p50) ${target(tcp <= 1, '<= 1 ms')}`,
      );
      row(
        'exec `true`: through daemon, Unix socket',
        `p50 ${fmt(s.daemon_unix.p50, 2)} ms, p95 ${fmt(s.daemon_unix.p95, 2)} ms`,
        `${sign(unix)} ms paired p50 (${sign(s.daemon_unix.p50 - s.direct.p50)} p50-p50) ${target(unix <= 1, '<= 1 ms')}`,
      );
      row('exec `true`: the hop alone (Unix, vs direct on the channel)', '', `${sign(hop)} ms paired p50`);
      agent.destroy();
      channel.close();
    }
    if (only.includes('cp')) {
      // The copy users make: into and out of a TCG guest, where the guest's own cost dwarfs the hop.
      const inst = await c2.get('ex');
      const bytes = GUEST_CP_MIB * 1024 * 1024;
      const q = '/cp?path=/root/cp.bin';
      // The guest is noisy (page cache, its own scheduler): three rounds, alternating which goes first, medians.
      const t = {
        upDirect: [] as number[],
        upDaemon: [] as number[],
        downDirect: [] as number[],
        downDaemon: [] as number[],
      };
      for (let round = 0; round < 3; round++) {
        const pairs: [number[], () => Promise<void>][] = [
          [t.upDirect, () => putBytes({ port: inst.agent_port, path: q, method: 'PUT' }, bytes)],
          [t.upDaemon, () => putBytes({ socketPath: d.socket, path: `/vms/ex${q}`, method: 'PUT' }, bytes)],
          [t.downDirect, () => fetchAll({ port: inst.agent_port, path: q })],
          [t.downDaemon, () => fetchAll({ socketPath: d.socket, path: `/vms/ex${q}` })],
        ];
        const order = round % 2 === 0 ? [0, 1, 2, 3] : [1, 0, 3, 2];
        for (const i of order) pairs[i][0].push(await timeIt(pairs[i][1]));
      }
      const up = { direct: stats(t.upDirect).p50, daemon: stats(t.upDaemon).p50 };
      const down = { direct: stats(t.downDirect).p50, daemon: stats(t.downDaemon).p50 };
      const mbs = (ms: number) => GUEST_CP_MIB / (ms / 1000);
      results.cp_tcg_guest_mib_per_s = {
        bytes,
        upload_direct: mbs(up.direct),
        upload_daemon: mbs(up.daemon),
        download_direct: mbs(down.direct),
        download_daemon: mbs(down.daemon),
      };
      row(
        `cp ${GUEST_CP_MIB} MiB into a TCG guest: direct / through daemon (median of 3)`,
        `${fmt(mbs(up.direct), 1)} / ${fmt(mbs(up.daemon), 1)} MiB/s`,
        `${fmt((up.direct / up.daemon) * 100, 0)}% of direct ${target(up.direct / up.daemon >= 0.9, '>= 90%')}`,
      );
      row(
        `cp ${GUEST_CP_MIB} MiB out of a TCG guest: direct / through daemon (median of 3)`,
        `${fmt(mbs(down.direct), 1)} / ${fmt(mbs(down.daemon), 1)} MiB/s`,
        `${fmt((down.direct / down.daemon) * 100, 0)}% of direct ${target(down.direct / down.daemon >= 0.9, '>= 90%')}`,
      );
    }
    if (only.includes('memory')) {
      const pids = execFileSync('pgrep', ['-f', 'process=svc-'], { encoding: 'utf8' }).trim().split('\n').map(Number);
      const rss = pids.map((p) => rssKiB(p) / 1024);
      results.qemu_rss_mib = stats(rss);
      row('QEMU RSS per guest (384 MB, TCG)', `p50 ${fmt(stats(rss).p50, 0)} MiB (n=${rss.length})`, '');
    }
  } finally {
    await removeAll(d);
    await d.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** 3. cp of 1 GiB: raw loopback socket (the limit) vs direct to an agent vs through the daemon. */
async function cpBenchmarks(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-cp-'));
  const d = await startSvcd(dir, {
    hypervisor: 'fake',
    fake_agent: true,
    test_mode: true,
    sandbox_metrics_enabled: false,
  });
  try {
    const inst = await d.client.create({ name: 'cp' });
    if (only.includes('exec')) {
      // The proxy's own cost, with the agent on this host instead of a TCG guest sharing the cores.
      const agent = new Agent({ keepAlive: true, maxSockets: 1 });
      const channel = await execChannel(inst.agent_port!);
      const direct = () => post(agent, { port: inst.agent_port }, '/exec?cmd=true');
      const directChannel = () => channel.call('cmd=true&buffered=true');
      const viaUnix = () => post(agent, { socketPath: d.socket }, '/vms/cp/exec?cmd=true');
      for (let i = 0; i < 20; i++) {
        await direct();
        await directChannel();
        await viaUnix();
      }
      const { samples, paired } = await rounds(
        { direct, direct_channel: directChannel, daemon_unix: viaUnix },
        400,
        'direct',
      );
      channel.close();
      const sa = stats(samples.direct);
      const sb = stats(samples.daemon_unix);
      const over = stats(paired.daemon_unix).p50;
      const hop = stats(samples.daemon_unix.map((x, i) => x - samples.direct_channel[i])).p50;
      results.exec_true_local_agent_ms = {
        direct: sa,
        direct_channel: stats(samples.direct_channel),
        daemon_unix: sb,
        overhead_p50: sb.p50 - sa.p50,
        overhead_paired_p50: over,
        hop_paired_p50_vs_direct_channel: hop,
      };
      row('exec `true`, local agent: direct', `p50 ${fmt(sa.p50, 2)} ms, p95 ${fmt(sa.p95, 2)} ms (n=400)`, '');
      row(
        'exec `true`, local agent: through daemon (Unix)',
        `p50 ${fmt(sb.p50, 2)} ms, p95 ${fmt(sb.p95, 2)} ms`,
        `${sign(over)} ms paired p50 (${sign(sb.p50 - sa.p50)} p50-p50) ${target(over <= 1, '<= 1 ms')}`,
      );
      row('exec `true`, local agent: the hop alone (vs direct on the channel)', '', `${sign(hop)} ms paired p50`);
      agent.destroy();
    }
    const guestFile = join(dir, 'data', 'vms', 'cp', 'guest', 'big.bin');
    const chunk = Buffer.alloc(1024 * 1024, 7);
    const send = (opts: Target & { method: string }) => putBytes(opts, GIB);
    const raw = await timeIt(
      () =>
        new Promise<void>((resolve) => {
          const srv = createServer((s) => {
            s.on('data', () => undefined);
            s.on('end', () => {
              srv.close();
              resolve();
            });
          });
          srv.listen(0, '127.0.0.1', () => {
            const s = connect((srv.address() as { port: number }).port, '127.0.0.1', () => pump(s, chunk, GIB));
          });
        }),
    );
    const q = `/cp?path=${encodeURIComponent(guestFile)}`;
    // CPU seconds each process spends on a copy: on 2 cores, three busy processes (client, daemon,
    // agent) cannot go as fast as two, so the daemon's share says how far its hop can be from free.
    // The daemon's includes its children: the svc-splice helper that moves large copies.
    const agentPid = pidListeningOn(inst.agent_port);
    // The agent's CPU is also taken on the direct copies: if the daemon's hop makes the agent work
    // harder for the same bytes (smaller reads), that shows as the agent's figure rising.
    const cpu = {
      daemon: { up: 0, down: 0 },
      agent: { up: 0, down: 0 },
      agent_direct: { up: 0, down: 0 },
      client: { up: 0, down: 0 },
      client_direct: { up: 0, down: 0 },
    };
    const metered = async (which: 'up' | 'down', fn: () => Promise<void>, direct = false) => {
      const d0 = cpuSeconds(d.proc.pid!, true);
      const a0 = agentPid ? cpuSeconds(agentPid) : 0;
      const c0 = process.cpuUsage();
      const ms = await timeIt(fn);
      const c = process.cpuUsage(c0);
      cpu[direct ? 'client_direct' : 'client'][which] += (c.user + c.system) / 1e6 / CP_ROUNDS;
      if (!direct) cpu.daemon[which] += (cpuSeconds(d.proc.pid!, true) - d0) / CP_ROUNDS;
      cpu[direct ? 'agent_direct' : 'agent'][which] += (agentPid ? cpuSeconds(agentPid) - a0 : 0) / CP_ROUNDS;
      return ms;
    };
    // Untimed first: whichever path carries it, the first copy that replaces the 1 GiB file costs
    // the agent 1.5-2 s more kernel time than later ones (measured: the position, not the path),
    // and without this it always fell on the daemon's first upload.
    await send({ port: inst.agent_port, path: q, method: 'PUT' });
    await send({ port: inst.agent_port, path: q, method: 'PUT' });
    await fetchAll({ port: inst.agent_port, path: q });
    resetPeak(d.proc.pid!);
    // A single copy each way swung by 2x between runs on this shared machine: rounds that alternate
    // which path goes first, medians.
    const t = {
      upDirect: [] as number[],
      upDaemon: [] as number[],
      downDirect: [] as number[],
      downDaemon: [] as number[],
    };
    for (let round = 0; round < CP_ROUNDS; round++) {
      const steps: [number[], () => Promise<number>][] = [
        [t.upDirect, () => metered('up', () => send({ port: inst.agent_port, path: q, method: 'PUT' }), true)],
        [t.upDaemon, () => metered('up', () => send({ socketPath: d.socket, path: `/vms/cp${q}`, method: 'PUT' }))],
        [t.downDirect, () => metered('down', () => fetchAll({ port: inst.agent_port, path: q }), true)],
        [t.downDaemon, () => metered('down', () => fetchAll({ socketPath: d.socket, path: `/vms/cp${q}` }))],
      ];
      for (const i of round % 2 === 0 ? [0, 1, 2, 3] : [1, 0, 3, 2]) steps[i][0].push(await steps[i][1]());
    }
    const [upDirect, upDaemon, downDirect, downDaemon] = [t.upDirect, t.upDaemon, t.downDirect, t.downDaemon].map(
      (v) => stats(v).p50,
    );
    const peak = rssKiB(d.proc.pid!, 'VmHWM') / 1024;
    const mbs = (ms: number) => GIB / 1048576 / (ms / 1000);
    results.cp_mib_per_s = {
      bytes: GIB,
      rounds: CP_ROUNDS,
      raw_loopback: mbs(raw),
      upload_direct: mbs(upDirect),
      upload_daemon: mbs(upDaemon),
      download_direct: mbs(downDirect),
      download_daemon: mbs(downDaemon),
      upload_ratio: upDirect / upDaemon,
      download_ratio: downDirect / downDaemon,
      daemon_peak_rss_mib: peak,
      cpu_seconds_through_daemon: cpu,
      spliced: process.env.SVC_SPLICE !== 'off',
    };
    const gib = `${fmt(GIB / 1073741824, 2)} GiB`;
    row(`cp ${gib}: raw loopback socket (limit)`, `${fmt(mbs(raw), 0)} MiB/s`, '');
    row(`cp ${gib} upload: direct to agent (median of ${CP_ROUNDS})`, `${fmt(mbs(upDirect), 0)} MiB/s`, '');
    row(
      `cp ${gib} upload: through daemon`,
      `${fmt(mbs(upDaemon), 0)} MiB/s`,
      `${fmt((upDirect / upDaemon) * 100, 0)}% of direct ${target(upDirect / upDaemon >= 0.9, '>= 90%')}`,
    );
    row(`cp ${gib} download: direct to agent (median of ${CP_ROUNDS})`, `${fmt(mbs(downDirect), 0)} MiB/s`, '');
    row(
      `cp ${gib} download: through daemon`,
      `${fmt(mbs(downDaemon), 0)} MiB/s`,
      `${fmt((downDirect / downDaemon) * 100, 0)}% of direct ${target(downDirect / downDaemon >= 0.9, '>= 90%')}`,
    );
    row('daemon peak RSS during the copies', `${fmt(peak, 0)} MiB`, `vs ${gib} moved`);
    if (agentPid) {
      row(
        `cp ${gib} through daemon: CPU s per copy, daemon (with its helper) / agent`,
        `up ${fmt(cpu.daemon.up, 2)} / ${fmt(cpu.agent.up, 2)}, down ${fmt(cpu.daemon.down, 2)} / ${fmt(cpu.agent.down, 2)}`,
        `the daemon's hop costs ${fmt((cpu.daemon.up / cpu.agent.up) * 100, 0)}% / ${fmt((cpu.daemon.down / cpu.agent.down) * 100, 0)}% of the agent's CPU`,
      );
      row(
        `cp ${gib}: agent CPU s per copy, direct / through daemon`,
        `up ${fmt(cpu.agent_direct.up, 2)} / ${fmt(cpu.agent.up, 2)}, down ${fmt(cpu.agent_direct.down, 2)} / ${fmt(cpu.agent.down, 2)}`,
        '',
      );
      row(
        `cp ${gib}: client CPU s per copy, direct / through daemon`,
        `up ${fmt(cpu.client_direct.up, 2)} / ${fmt(cpu.client.up, 2)}, down ${fmt(cpu.client_direct.down, 2)} / ${fmt(cpu.client.down, 2)}`,
        '',
      );
    }
  } finally {
    await d.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** 4. control plane on the fake hypervisor; 5a. daemon RSS idle and with 100 VMs. */
async function controlBenchmarks(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-ctl-'));
  const d = await startSvcd(dir, { hypervisor: 'fake', fake_boot_delay: '0ms', sandbox_metrics_enabled: false });
  try {
    const c = d.client;
    await new Promise((r) => setTimeout(r, 500));
    const idle = rssKiB(d.proc.pid!) / 1024;
    const t0 = performance.now();
    const OPS = 200;
    for (let i = 0; i < OPS; i++) {
      await c.create({ name: `op${i}` });
      await c.delete(`op${i}`);
    }
    const opsPerSec = OPS / ((performance.now() - t0) / 1000);
    for (let i = 0; i < 100; i++) await c.create({ name: `m${i}` });
    const with100 = rssKiB(d.proc.pid!) / 1024;
    for (let i = 100; i < 1000; i += 10)
      await Promise.all(Array.from({ length: 10 }, (_, k) => c.create({ name: `m${i + k}` })));
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const list: number[] = [];
    const get = () =>
      new Promise<void>((resolve, reject) => {
        request({ agent, socketPath: d.socket, path: '/vms' }, (res) => {
          const h = createHash('sha1');
          res.on('data', (x) => h.update(x));
          res.on('end', resolve);
        })
          .on('error', reject)
          .end();
      });
    for (let i = 0; i < 5; i++) await get();
    for (let i = 0; i < 50; i++) list.push(await timeIt(get));
    const s = stats(list);
    results.control_plane = {
      create_delete_ops_per_s: opsPerSec,
      get_vms_1000_ms: s,
      daemon_rss_idle_mib: idle,
      daemon_rss_100_vms_mib: with100,
    };
    row('control plane (fake): create+delete', `${fmt(opsPerSec, 0)} ops/s (sequential, n=${OPS})`, '');
    row(
      'GET /vms with 1,000 VMs',
      `p50 ${fmt(s.p50, 2)} ms, p95 ${fmt(s.p95, 2)} ms`,
      target(s.p50 < 10, '< 10 ms p50'),
    );
    row('daemon RSS idle / with 100 VMs (fake)', `${fmt(idle, 0)} MiB / ${fmt(with100, 0)} MiB`, '');
    agent.destroy();
  } finally {
    await d.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const machine = {
  cpus: cpus().length,
  cpu_model: cpus()[0]?.model,
  mem_gib: Math.round(totalmem() / 2 ** 30),
  node: process.version,
  qemu: (() => {
    try {
      return execFileSync('qemu-system-x86_64', ['--version'], { encoding: 'utf8' }).split('\n')[0];
    } catch {
      return 'absent';
    }
  })(),
};
if (only.includes('boot') || only.includes('exec') || only.includes('memory') || only.includes('cp'))
  await qemuBenchmarks();
if (only.includes('debian')) await debianBenchmarks();
if (only.includes('cp') || only.includes('cp-local')) await cpBenchmarks();
if (only.includes('net')) await netBenchmarks(row, results);
if (only.includes('processes')) await processBenchmarks(row, results);
if (only.includes('forks')) await forkBenchmarks(row, results);
if (only.includes('vm-snapshots')) await vmSnapshotBenchmarks(row, results);
if (only.includes('snapshots')) await snapshotCreateBenchmarks(row, results);
if (only.includes('egress-secrets')) await egressSecretBenchmarks(row, results);
if (only.includes('cluster')) await clusterBenchmarks(row, results);
if (only.includes('moves')) await moveBenchmarks(row, results);
if (only.includes('e2b')) await e2bBenchmarks(row, results);
if (only.includes('code-interpreter')) await codeInterpreterBenchmarks(row, results);
if (only.includes('import')) await importBenchmarks();
if (only.includes('control')) await controlBenchmarks();
const w = [Math.max(...rows.map((r) => r[0].length)), Math.max(...rows.map((r) => r[1].length))];
console.log(
  `svc benchmarks, ${new Date().toISOString()}, ${machine.cpus} cpus (${machine.cpu_model}), ${machine.mem_gib} GiB, ${machine.qemu}\n`,
);
for (const r of rows) console.log(`${r[0].padEnd(w[0])}  ${r[1].padEnd(w[1])}  ${r[2]}`);
const out = { at: new Date().toISOString(), machine, n: N, results };
mkdirSync(join(REPO, 'bench', 'results'), { recursive: true });
writeFileSync(join(REPO, 'bench', 'results', `${out.at.replace(/[:.]/g, '-')}.json`), JSON.stringify(out, null, 2));
writeFileSync(join(REPO, 'bench', 'results', 'latest.json'), JSON.stringify(out, null, 2));
