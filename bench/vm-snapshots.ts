// BENCH_ONLY=vm-snapshots: a VM's named snapshots (docs/snapshots.md), through the daemon.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { diskUse, fmt, memoryKiB, minimalQemu, qemuPidOf, startSvcd, stats, type Daemon, type Row } from './lib.js';

const ROUNDS = Number(process.env.BENCH_VM_SNAPSHOT_ROUNDS ?? 5);
/** New VMs made one after the other from one snapshot. */
const FAN = 4;
/** VMs up at once for the memory rows: from the shared snapshot, and each from a snapshot of its own. */
const MEM_N = Number(process.env.BENCH_VM_SNAPSHOT_MEM_N ?? 3);

/**
 * What a named snapshot costs, in one run on a minimal guest of 512 MB: taking one of the running
 * guest (the call, and how long the guest was held, read from the daemon's capture log) against a
 * suspend of the same VM; a revert to it, to a guest that answers again, against a restore of the
 * suspend and a cold boot; new VMs from one snapshot (the second makes its RAM image); and the
 * disk each snapshot adds, against the VM's own files; and the memory of VMs up at once that map
 * one snapshot's RAM image, against as many each loaded from a memory stream of its own.
 */
export async function vmSnapshotBenchmarks(row: Row, results: Record<string, unknown>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-vmsnap-'));
  let d: Daemon | undefined;
  try {
    d = await startSvcd(dir, minimalQemu({ memory_mb: 512 }));
    const c = d.client;
    const cold: number[] = [];
    let t0 = performance.now();
    await c.create({ name: 'vm', persistent: true });
    cold.push(performance.now() - t0);
    const take: number[] = [];
    const revert: number[] = [];
    const suspend: number[] = [];
    const restore: number[] = [];
    const vmDir = join(dir, 'data', 'vms', 'vm');
    for (let i = 0; i < ROUNDS; i++) {
      t0 = performance.now();
      await c.takeSnapshot('vm', { name: `s${i}` });
      take.push(performance.now() - t0);
      await c.exec('vm', { cmd: 'sh', args: ['-c', `echo ${i} > /root/round`] });
      t0 = performance.now();
      await c.revert('vm', `s${i}`);
      await c.exec('vm', { cmd: 'true', args: [] });
      revert.push(performance.now() - t0);
      t0 = performance.now();
      await c.suspend('vm');
      suspend.push(performance.now() - t0);
      t0 = performance.now();
      await c.restore('vm');
      await c.exec('vm', { cmd: 'true', args: [] });
      restore.push(performance.now() - t0);
    }
    // New VMs from one snapshot: the first makes a RAM image of its memory stream, the next map it.
    await c.takeSnapshot('vm', { name: 'fan' });
    const fan: number[] = [];
    for (let i = 0; i < FAN; i++) {
      t0 = performance.now();
      await c.create({ name: `fan${i}`, from: 'vm', snapshot: 'fan' });
      await c.exec(`fan${i}`, { cmd: 'true', args: [] });
      fan.push(performance.now() - t0);
      await c.delete(`fan${i}`);
    }
    // Memory: VMs from `fan` (its RAM image made by now) map one file and share its pages; a VM
    // from a snapshot of its own (its first, so a stream) holds the guest's memory by itself.
    const mapped = Array.from({ length: MEM_N }, (_, i) => `map${i}`);
    for (const n of mapped) await c.create({ name: n, from: 'vm', snapshot: 'fan' });
    const loaded = Array.from({ length: MEM_N }, (_, i) => `load${i}`);
    for (const [i, n] of loaded.entries()) {
      await c.takeSnapshot('vm', { name: `solo${i}` });
      await c.create({ name: n, from: 'vm', snapshot: `solo${i}` });
    }
    await new Promise((r) => setTimeout(r, 5000)); // let them settle
    const memOf = (names: string[]) => {
      const ms = names.map((n) => memoryKiB(qemuPidOf(dir, n)));
      const sum = (k: 'rss' | 'pss' | 'anon') => ms.reduce((a, m) => a + m[k], 0) / 1024;
      return { rss: sum('rss'), pss: sum('pss'), anon: sum('anon') };
    };
    const [memMapped, memLoaded] = [memOf(mapped), memOf(loaded)];
    for (const n of [...mapped, ...loaded]) await c.delete(n);
    for (let i = 0; i < MEM_N; i++) await c.deleteSnapshot('vm', `solo${i}`);
    // Cold boots beside them, in the same run.
    for (let i = 0; i < 2; i++) {
      t0 = performance.now();
      await c.create({ name: `cold${i}`, memory_mb: 512 });
      cold.push(performance.now() - t0);
      await c.delete(`cold${i}`);
    }
    const held = d
      .logged('capture timing')
      .filter((r) => r.vm === 'vm')
      .map((r) => Number(r.paused_ms));
    const use = diskUse([vmDir, ...Array.from({ length: ROUNDS }, (_, i) => join(vmDir, 'snapshots', `s${i}`))]);
    // A snapshot's memory stream is linked by its folder alone; its layers by the VM (and later snapshots) too.
    const perSnapshot = (use.own.slice(1).reduce((a, b) => a + b, 0) + use.shared) / ROUNDS;
    const [tk, rv, su, rs, cb, h] = [
      stats(take),
      stats(revert),
      stats(suspend),
      stats(restore),
      stats(cold),
      stats(held),
    ];
    row(
      'snapshot of a running guest (512 MB, TCG): the call / the guest held',
      `p50 ${fmt(tk.p50, 0)} / ${fmt(h.p50, 0)} ms, p95 ${fmt(tk.p95, 0)} / ${fmt(h.p95, 0)} ms (n=${ROUNDS})`,
      `a suspend of the same VM p50 ${fmt(su.p50, 0)} ms (the guest gone until a restore)`,
    );
    row(
      'revert to it, the guest answering again',
      `p50 ${fmt(rv.p50, 0)} ms, p95 ${fmt(rv.p95, 0)} ms`,
      `a restore of the suspend p50 ${fmt(rs.p50, 0)} ms; a cold boot p50 ${fmt(cb.p50, 0)} ms (${fmt(cb.p50 / rv.p50, 1)}x the revert)`,
    );
    const later = stats(fan.slice(2));
    row(
      `${FAN} new VMs from one snapshot, one after the other, each to its first exec`,
      `the first ${fmt(fan[0], 0)} ms, the second ${fmt(fan[1], 0)} ms, the others p50 ${fmt(later.p50, 0)} ms`,
      `the first loads the snapshot's memory stream; the second makes a RAM image of it and puts it in the snapshot; the others (and a revert) map it`,
    );
    // Pss counts a page N processes share as 1/N in each: summed, the shared RAM image counts once.
    row(
      `memory of ${MEM_N} idle VMs from one snapshot (its RAM image) against ${MEM_N} each from a stream of its own (QEMUs' Pss summed)`,
      `${fmt(memMapped.pss, 0)} MiB against ${fmt(memLoaded.pss, 0)} MiB (${fmt((memMapped.pss / memLoaded.pss) * 100, 0)}%)`,
      `anonymous ${fmt(memMapped.anon, 0)} against ${fmt(memLoaded.anon, 0)} MiB; Rss ${fmt(memMapped.rss, 0)} against ${fmt(memLoaded.rss, 0)} MiB (Rss counts a shared page in each VM)`,
    );
    row(
      `disk of ${ROUNDS} snapshots of the running guest (links counted once)`,
      `${fmt(perSnapshot / 2 ** 20, 1)} MiB per snapshot`,
      `its memory stream (its own file) and the disk's writes since the one before (layers, shared with the VM: ${fmt(use.shared / 2 ** 20, 1)} MiB in all); the VM's own files ${fmt(use.own[0] / 2 ** 20, 1)} MiB`,
    );
    results.vm_snapshots = {
      rounds: ROUNDS,
      take_ms: tk,
      held_ms: h,
      revert_ms: rv,
      suspend_ms: su,
      restore_ms: rs,
      cold_boot_ms: cb,
      disk_bytes: use,
      from_snapshot_ms: { first: fan[0], second: fan[1], later },
      memory_mib: { n: MEM_N, mapped: memMapped, loaded: memLoaded },
    };
  } finally {
    if (d) {
      await d.client.delete('vm').catch(() => undefined);
      await d.stop();
    }
    rmSync(dir, { recursive: true, force: true });
  }
}
