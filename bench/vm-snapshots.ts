// BENCH_ONLY=vm-snapshots: a VM's named snapshots (docs/snapshots.md), through the daemon.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { diskUse, fmt, minimalQemu, startSvcd, stats, type Daemon, type Row } from './lib.js';

const ROUNDS = Number(process.env.BENCH_VM_SNAPSHOT_ROUNDS ?? 5);
/** New VMs made one after the other from one snapshot. */
const FAN = 4;

/**
 * What a named snapshot costs, in one run on a minimal guest of 512 MB: taking one of the running
 * guest (the call, and how long the guest was held, read from the daemon's capture log) against a
 * suspend of the same VM; a revert to it, to a guest that answers again, against a restore of the
 * suspend and a cold boot; new VMs from one snapshot (the second makes its RAM image); and the
 * disk each snapshot adds, against the VM's own files.
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
    };
  } finally {
    if (d) {
      await d.client.delete('vm').catch(() => undefined);
      await d.stop();
    }
    rmSync(dir, { recursive: true, force: true });
  }
}
