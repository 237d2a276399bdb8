// BENCH_ONLY=forks: forks of a running guest (docs/forks.md), through the daemon.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SvcClient } from '../src/adapters/client/svc-client.js';
import { MAX_LAYERS } from '../src/adapters/hypervisor/qemu/disk-layers.js';
import { fmt, memoryKiB, minimalQemu, qemuPidOf, startSvcd, stats, type Daemon, type Row } from './lib.js';

const ROUNDS = Number(process.env.BENCH_FORK_ROUNDS ?? 5);
/** How many forks, clones and cold boots the "N at once" rows make. */
const N = Number(process.env.BENCH_FORK_N ?? 10);

/**
 * What a fork costs, in one run on minimal guests of 512 MB: how long the source is held (QEMU's
 * own STOP to RESUME, the daemon's `paused_ms`) against a suspend of the same VM; the call to ready
 * for 1 and 3 forks; N forks against N clones of a suspended template and N cold boots, made at
 * once; and the memory each of N idle forks holds against N cold VMs.
 */
export async function forkBenchmarks(row: Row, results: Record<string, unknown>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-fork-'));
  let d: Daemon | undefined;
  try {
    d = await startSvcd(dir, minimalQemu({ memory_mb: 512, max_vms: 4 * N }));
    const c = d.client;
    const qemuPid = (vm: string) => qemuPidOf(dir, vm);
    let t0 = performance.now();
    await c.create({ name: 'src', persistent: true });
    const boot = performance.now() - t0;

    // 1. the hold, and the call to ready, for 1 and 3 forks
    const held: Record<number, number[]> = { 1: [], 3: [] };
    const ready: Record<number, number[]> = { 1: [], 3: [] };
    for (let i = 0; i < ROUNDS; i++) {
      for (const n of [1, 3]) {
        t0 = performance.now();
        const out = await c.fork('src', { count: n });
        ready[n].push(performance.now() - t0);
        held[n].push(out.paused_ms);
        for (const v of out.vms) await c.delete(v.name);
      }
    }
    // A suspend of the same VM: the guest is gone from its stop until a restore.
    const suspend: number[] = [];
    for (let i = 0; i < 3; i++) {
      t0 = performance.now();
      await c.suspend('src');
      suspend.push(performance.now() - t0);
      await c.restore('src');
    }
    const allHeld = [...held[1], ...held[3]];
    const [h, r1, r3, su] = [stats(allHeld), stats(ready[1]), stats(ready[3]), stats(suspend)];
    row(
      'fork a running guest (512 MB, TCG): the source held while captured',
      `p50 ${fmt(h.p50, 0)} ms, p95 ${fmt(h.p95, 0)} ms (n=${allHeld.length})`,
      `a suspend of the same VM p50 ${fmt(su.p50, 0)} ms: the hold is ${fmt((h.p50 / su.p50) * 100, 0)}% of it (goal <= 25%: ${h.p50 <= su.p50 / 4 ? 'met' : 'missed'})`,
    );
    row(
      'fork: the call to every fork ready (1 fork / 3 forks)',
      `p50 ${fmt(r1.p50, 0)} ms / ${fmt(r3.p50, 0)} ms`,
      `cold boot of the source: ${fmt(boot, 0)} ms (${fmt(boot / r1.p50, 1)}x one fork)`,
    );

    // A source forked again and again is put back on its image while it runs (live-flatten.ts).
    const flattens = d.logged('disk chain flattened').filter((r) => r.vm === 'src');
    const flattenMs = flattens.map((r) => Number(r.flatten_ms));
    row(
      `a source forked ${2 * ROUNDS} times: its disk chain flattened while it runs (at ${MAX_LAYERS} layers)`,
      flattenMs.length ? `${flattenMs.map((ms) => fmt(ms, 0)).join(', ')} ms (${flattenMs.length}x)` : 'none',
      `one fork call p50 ${fmt(r1.p50, 0)} ms; the source runs on while QEMU copies the layers into its disk`,
    );

    // 2. N at once: forks of src, clones of a suspended template, cold boots; then their memory
    const allReady = async (make: (i: number) => Promise<unknown>) => {
      const start = performance.now();
      await Promise.all(Array.from({ length: N }, (_, i) => make(i)));
      return performance.now() - start;
    };
    const idleMemory = async (names: string[]) => {
      await new Promise((r) => setTimeout(r, 5000)); // let them settle
      return names.map((n) => memoryKiB(qemuPid(n)));
    };
    const sum = (ms: { anon: number; rss: number; pss: number }[], k: 'anon' | 'rss' | 'pss') =>
      ms.reduce((s, m) => s + m[k], 0) / 1024;
    const removeAll = async (cl: SvcClient, names: string[]) => {
      for (const n of names) await cl.delete(n);
    };
    t0 = performance.now();
    const forked = (await c.fork('src', { count: N })).vms.map((v) => v.name);
    const forksMs = performance.now() - t0;
    const forkMem = await idleMemory(forked);
    await removeAll(c, forked);

    await c.create({ name: 'tpl', persistent: true });
    await c.suspend('tpl');
    const clonesMs = await allReady((i) => c.create({ name: `cl${i}`, from: 'tpl' }));
    const clones = Array.from({ length: N }, (_, i) => `cl${i}`);
    await removeAll(c, clones);

    const coldMs = await allReady((i) => c.create({ name: `cold${i}`, memory_mb: 512 }));
    const colds = Array.from({ length: N }, (_, i) => `cold${i}`);
    const coldMem = await idleMemory(colds);
    await removeAll(c, colds);

    row(
      `${N} forks of a running guest, ready (one call)`,
      `${fmt(forksMs, 0)} ms`,
      `${N} clones of a suspended template at once ${fmt(clonesMs, 0)} ms; ${N} cold boots at once ${fmt(coldMs, 0)} ms; one cold boot ${fmt(boot, 0)} ms (goal: ${N} forks in less than one cold boot: ${forksMs < boot ? 'met' : 'missed'})`,
    );
    // Pss counts a page N processes share as 1/N in each: summed, the shared RAM image counts once.
    const [fp, cp] = [sum(forkMem, 'pss'), sum(coldMem, 'pss')];
    row(
      `memory of ${N} idle forks against ${N} idle cold VMs (QEMUs' Pss summed: the shared RAM image once)`,
      `${fmt(fp, 0)} MiB against ${fmt(cp, 0)} MiB (${fmt((fp / cp) * 100, 0)}%)`,
      `anonymous memory ${fmt(sum(forkMem, 'anon'), 0)} against ${fmt(sum(coldMem, 'anon'), 0)} MiB; forks map one RAM image made from the capture (goal < 50%: ${fp < cp / 2 ? 'met' : 'missed'})`,
    );
    results.forks = {
      rounds: ROUNDS,
      n: N,
      held_ms: h,
      flatten_ms: flattenMs,
      suspend_ms: su,
      ready_ms: { 1: r1, 3: r3 },
      cold_boot_ms: boot,
      at_once_ms: { forks: forksMs, clones: clonesMs, cold: coldMs },
      memory_kib: { forks: forkMem, cold: coldMem },
    };
  } finally {
    if (d) {
      for (const n of ['src', 'tpl']) await d.client.delete(n).catch(() => undefined);
      await d.stop();
    }
    rmSync(dir, { recursive: true, force: true });
  }
}
