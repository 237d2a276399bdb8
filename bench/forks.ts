// BENCH_ONLY=forks: forks of a running guest (docs/forks.md), through the daemon.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fmt, minimalQemu, startSvcd, stats, type Daemon, type Row } from './lib.js';

const ROUNDS = Number(process.env.BENCH_FORK_ROUNDS ?? 5);

/**
 * What a fork costs, in one run on one minimal guest: how long the source is held (the daemon's
 * `paused_ms`), and the call to ready for 1 and 3 forks, beside a cold boot of the same shape.
 */
export async function forkBenchmarks(row: Row, results: Record<string, unknown>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-fork-'));
  let d: Daemon | undefined;
  try {
    d = await startSvcd(dir, minimalQemu({ memory_mb: 512 }));
    const c = d.client;
    let t0 = performance.now();
    await c.create({ name: 'src' });
    const boot = performance.now() - t0;
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
    const [h1, h3, r1, r3] = [stats(held[1]), stats(held[3]), stats(ready[1]), stats(ready[3])];
    row(
      'fork a running guest (512 MB, TCG): the source held while captured',
      `p50 ${fmt(h1.p50, 0)} ms, max ${fmt(Math.max(...held[1], ...held[3]), 0)} ms (n=${ROUNDS * 2})`,
      'the memory sent while the guest runs; held for the last of it and the disk switch',
    );
    row(
      'fork: the call to every fork ready (1 fork / 3 forks)',
      `p50 ${fmt(r1.p50, 0)} ms / ${fmt(r3.p50, 0)} ms`,
      `cold boot of the source: ${fmt(boot, 0)} ms (${fmt(boot / r1.p50, 1)}x one fork)`,
    );
    results.forks = { rounds: ROUNDS, held_ms: { 1: h1, 3: h3 }, ready_ms: { 1: r1, 3: r3 }, cold_boot_ms: boot };
  } finally {
    if (d) {
      await d.client.delete('src').catch(() => undefined);
      await d.stop();
    }
    rmSync(dir, { recursive: true, force: true });
  }
}
