// BENCH_ONLY=snapshots: plain creates restored from the image's snapshot (docs/snapshot-creates.md).
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureImage } from '../test/e2e/image.js';
import { diskUse, fmt, memoryKiB, startSvcd, stats, type Daemon, type Row } from './lib.js';

/** Creates in a row per image and mode (cold boots of debian are the slow part: fewer of them). */
const ROUNDS = Number(process.env.BENCH_SNAP_ROUNDS ?? 10);
const DEBIAN_COLD = Number(process.env.BENCH_SNAP_DEBIAN_COLD ?? 3);
/** Idle VMs whose memory is summed, each way (minimal). */
const IDLE = Number(process.env.BENCH_SNAP_IDLE ?? 10);
const AT_ONCE = 4;

type Image = 'minimal' | 'debian';

function config(image: Image, fromSnapshot: boolean): Record<string, unknown> {
  return {
    hypervisor: 'qemu',
    images_dir: ensureImage(image),
    image,
    memory_mb: image === 'debian' ? 512 : 256,
    sandbox_metrics_enabled: false,
    ready_timeout: '300s',
    max_vms: 40,
    create_from_snapshot: fromSnapshot,
  };
}

/**
 * Create to agent-ready from the image's snapshot against a cold boot, per image, in one run:
 * creates one after another (no pause for a spare to be warmed), 4 at once, the capture's time
 * and disk, and for `minimal` the memory of idle VMs made each way.
 */
export async function snapshotCreateBenchmarks(row: Row, results: Record<string, unknown>): Promise<void> {
  const out: Record<string, unknown> = {};
  const images = (process.env.BENCH_SNAP_IMAGES ?? 'minimal,debian').split(',') as Image[];
  for (const image of images) {
    const dir = mkdtempSync(join(tmpdir(), `svc-bench-snap-${image}-`));
    let cold: Daemon | undefined;
    let snap: Daemon | undefined;
    try {
      for (const sub of ['cold', 'snap']) mkdirSync(join(dir, sub));
      cold = await startSvcd(join(dir, 'cold'), config(image, false));
      snap = await startSvcd(join(dir, 'snap'), config(image, true));
      const timed = async (d: Daemon, name: string) => {
        const t0 = performance.now();
        await d.client.create({ name });
        return performance.now() - t0;
      };
      // The first create of the shape boots; its snapshot is captured after it.
      const first = await timed(snap, 'first');
      const t0 = performance.now();
      let info = await snap.client.getImage(image);
      while (!info.snapshots?.length) {
        if (performance.now() - t0 > 600_000) throw new Error(`no snapshot of ${image} after 10 min`);
        await new Promise((r) => setTimeout(r, 250));
        info = await snap.client.getImage(image);
      }
      const capture = info.snapshots[0];
      await snap.client.delete('first');

      const coldMs: number[] = [];
      const n = image === 'debian' ? DEBIAN_COLD : ROUNDS;
      for (let i = 0; i < n; i++) {
        coldMs.push(await timed(cold, `c${i}`));
        await cold.client.delete(`c${i}`);
      }
      // Each removed once ready, as the cold ones: the row is the create, not a host filling up.
      const snapMs: number[] = [];
      for (let i = 0; i < ROUNDS; i++) {
        snapMs.push(await timed(snap, `s${i}`));
        await snap.client.delete(`s${i}`);
      }
      // The same, a second and a half apart: the QEMU started ahead for the next copy (a spare,
      // docs/suspend-and-clones.md) has had its time.
      const apartMs: number[] = [];
      for (let i = 0; i < ROUNDS; i++) {
        await new Promise((r) => setTimeout(r, 1500));
        apartMs.push(await timed(snap, `p${i}`));
        await snap.client.delete(`p${i}`);
      }
      const atOnce = async (d: Daemon, prefix: string) => {
        const start = performance.now();
        await Promise.all(Array.from({ length: AT_ONCE }, (_, i) => d.client.create({ name: `${prefix}${i}` })));
        return performance.now() - start;
      };
      const snapAtOnce = await atOnce(snap, 'q');
      const coldAtOnce = image === 'minimal' ? await atOnce(cold, 'q') : undefined;
      const [c, s, p] = [stats(coldMs), stats(snapMs), stats(apartMs)];
      row(
        `create to agent-ready, \`${image}\`, from its snapshot (${ROUNDS} in a row, each removed when ready)`,
        `p50 ${fmt(s.p50, 0)} ms, p95 ${fmt(s.p95, 0)} ms`,
        `cold boot p50 ${fmt(c.p50, 0)} ms, p95 ${fmt(c.p95, 0)} ms (n=${n}): ${fmt(c.p50 / s.p50, 1)}x${image === 'debian' ? ` (goal >= 20x: ${c.p50 / s.p50 >= 20 ? 'met' : 'missed'})` : ''}`,
      );
      row(
        `create to agent-ready, \`${image}\`, from its snapshot, 1.5 s apart (the spare started ahead)`,
        `p50 ${fmt(p.p50, 0)} ms, p95 ${fmt(p.p95, 0)} ms`,
        `${fmt(c.p50 / p.p50, 1)}x the cold boot${image === 'debian' ? ` (goal >= 20x: ${c.p50 / p.p50 >= 20 ? 'met' : 'missed'})` : ''}`,
      );
      row(
        `${AT_ONCE} creates at once, \`${image}\`, from the snapshot`,
        `${fmt(snapAtOnce, 0)} ms`,
        coldAtOnce !== undefined
          ? `${AT_ONCE} cold boots at once ${fmt(coldAtOnce, 0)} ms (${fmt(coldAtOnce / snapAtOnce, 1)}x)`
          : '',
      );
      row(
        `the snapshot of \`${image}\` (${capture.cpus} cpu, ${capture.memory_mb} MB): capture and disk`,
        `${fmt(capture.capture_ms / 1000, 1)} s, ${fmt(capture.size_bytes / 2 ** 20, 0)} MiB`,
        `made in the background after the first create of the shape, which booted in ${fmt(first / 1000, 1)} s`,
      );
      const entry: Record<string, unknown> = {
        cold_ms: c,
        snapshot_ms: s,
        snapshot_apart_ms: p,
        at_once_ms: { snapshot: snapAtOnce, cold: coldAtOnce },
        capture_ms: capture.capture_ms,
        snapshot_bytes: capture.size_bytes,
        first_create_ms: first,
      };
      for (let i = 0; i < AT_ONCE; i++) await snap.client.delete(`q${i}`);
      if (coldAtOnce !== undefined) for (let i = 0; i < AT_ONCE; i++) await cold.client.delete(`q${i}`);

      if (image === 'minimal') {
        // Memory and disk of idle VMs made each way.
        const names = (p: string) => Array.from({ length: IDLE }, (_, i) => `${p}${i}`);
        const pidOf = (d: string, vm: string) =>
          (
            JSON.parse(readFileSync(join(d, 'data', 'vms', vm, 'instance.json'), 'utf8')) as {
              runtime?: { pid?: number };
            }
          ).runtime?.pid ?? 0;
        const idle = async (d: Daemon, sub: string, p: string) => {
          await Promise.all(names(p).map((vm) => d.client.create({ name: vm })));
          await new Promise((r) => setTimeout(r, 5000));
          const mem = names(p).map((vm) => memoryKiB(pidOf(join(dir, sub), vm)));
          const disk = diskUse(names(p).map((vm) => join(dir, sub, 'data', 'vms', vm)));
          for (const vm of names(p)) await d.client.delete(vm);
          return {
            anon: mem.reduce((a, m) => a + m.anon, 0) / 1024,
            pss: mem.reduce((a, m) => a + m.pss, 0) / 1024,
            disk,
          };
        };
        const ms = await idle(snap, 'snap', 'm');
        const mc = await idle(cold, 'cold', 'm');
        row(
          `memory of ${IDLE} idle \`minimal\` VMs from the snapshot against ${IDLE} cold-booted (QEMUs' anonymous memory, summed)`,
          `${fmt(ms.anon, 0)} MiB against ${fmt(mc.anon, 0)} MiB (${fmt((ms.anon / mc.anon) * 100, 0)}%)`,
          `Pss ${fmt(ms.pss, 0)} against ${fmt(mc.pss, 0)} MiB`,
        );
        entry.idle_memory_mib = { snapshot: ms, cold: mc };
      }
      out[image] = entry;
    } finally {
      for (const d of [cold, snap]) await d?.stop().catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    }
  }
  results.snapshot_creates = out;
}
