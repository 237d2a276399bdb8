import { open, readFile, rename, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { inject, injectable } from 'inversify';
import type { MetricsPoint } from '../../domain/events.js';
import type { Config } from '../../app/config.js';
import { AppConfig } from '../../app/tokens.js';
import { VmStore, type MetricsHistory, type MetricsSeries } from '../../ports/stores.js';

/**
 * `vms/<name>/metrics.ring`, format version 1 (docs/metrics-ring.md):
 *   header, 64 bytes: magic "SVCRING\0", u16 version=1, u16 header_size=64, u16 record_size=80,
 *     u16 reserved, u32 capacity, u32 interval_ms, f64 created_ms, then zeros; all little-endian.
 *   capacity slots of 80 bytes: u64 seq (0 = empty), f64 t_ms, uptime_sec, load1, mem_total_bytes,
 *     mem_available_bytes, disk_total_bytes, disk_free_bytes (NaN = absent), u32 reserved,
 *     u32 crc32 of bytes 0..75.
 * An append is one positioned write of one slot (seq - 1) % capacity: O(1). The header never
 * changes after creation, and a torn slot fails its CRC and is skipped, so a crash mid-write can
 * lose at most the sample being written. Readers order valid slots by seq.
 */
export const RING_MAGIC = Buffer.from('SVCRING\0', 'latin1');
export const RING_VERSION = 1;
export const HEADER_SIZE = 64;
export const RECORD_SIZE = 80;

interface OpenRing {
  fh: FileHandle;
  capacity: number;
  nextSeq: bigint;
}

export function encodeHeader(capacity: number, intervalMs: number, createdMs: number): Buffer {
  const h = Buffer.alloc(HEADER_SIZE);
  RING_MAGIC.copy(h, 0);
  h.writeUInt16LE(RING_VERSION, 8);
  h.writeUInt16LE(HEADER_SIZE, 10);
  h.writeUInt16LE(RECORD_SIZE, 12);
  h.writeUInt32LE(capacity, 16);
  h.writeUInt32LE(intervalMs, 20);
  h.writeDoubleLE(createdMs, 24);
  return h;
}

export function encodeRecord(seq: bigint, p: MetricsPoint): Buffer {
  const r = Buffer.alloc(RECORD_SIZE);
  r.writeBigUInt64LE(seq, 0);
  const vals = [
    p.t_ms,
    p.uptime_sec,
    p.load1,
    p.mem_total_bytes,
    p.mem_available_bytes,
    p.disk_total_bytes ?? NaN,
    p.disk_free_bytes ?? NaN,
  ];
  vals.forEach((v, i) => r.writeDoubleLE(v, 8 + i * 8));
  r.writeUInt32LE(crc32(r.subarray(0, 76)), 76);
  return r;
}

export function decodeRing(buf: Buffer): {
  capacity: number;
  interval_ms: number;
  records: { seq: bigint; point: MetricsPoint }[];
} {
  if (buf.length < HEADER_SIZE || !buf.subarray(0, 8).equals(RING_MAGIC)) throw new Error('not a metrics ring');
  const version = buf.readUInt16LE(8);
  if (version !== RING_VERSION) throw new Error(`metrics ring version ${version} is not supported`);
  const recordSize = buf.readUInt16LE(12);
  const capacity = buf.readUInt32LE(16);
  const interval_ms = buf.readUInt32LE(20);
  const records: { seq: bigint; point: MetricsPoint }[] = [];
  for (let i = 0; i < capacity; i++) {
    const off = HEADER_SIZE + i * recordSize;
    if (off + RECORD_SIZE > buf.length) break;
    const r = buf.subarray(off, off + RECORD_SIZE);
    const seq = r.readBigUInt64LE(0);
    if (seq === 0n || r.readUInt32LE(76) !== crc32(r.subarray(0, 76))) continue;
    const v = (k: number) => r.readDoubleLE(8 + k * 8);
    const point: MetricsPoint = {
      t_ms: v(0),
      uptime_sec: v(1),
      load1: v(2),
      mem_total_bytes: v(3),
      mem_available_bytes: v(4),
    };
    if (!Number.isNaN(v(5))) point.disk_total_bytes = v(5);
    if (!Number.isNaN(v(6))) point.disk_free_bytes = v(6);
    records.push({ seq, point });
  }
  records.sort((a, b) => (a.seq < b.seq ? -1 : a.seq > b.seq ? 1 : 0));
  return { capacity, interval_ms, records };
}

@injectable()
export class FsMetricsHistory implements MetricsHistory {
  private readonly rings = new Map<string, Promise<OpenRing>>();

  constructor(
    @inject(AppConfig) private readonly config: Config,
    @inject(VmStore) private readonly store: VmStore,
  ) {}

  private path(vm: string): string {
    return join(this.store.dir(vm), 'metrics.ring');
  }

  private openRing(vm: string): Promise<OpenRing> {
    let p = this.rings.get(vm);
    if (!p) {
      p = (async () => {
        const path = this.path(vm);
        const existing = await readFile(path).catch(() => undefined);
        if (existing) {
          try {
            const ring = decodeRing(existing);
            const last = ring.records.at(-1)?.seq ?? 0n;
            return { fh: await open(path, 'r+'), capacity: ring.capacity, nextSeq: last + 1n };
          } catch {
            await rename(path, `${path}.corrupt`).catch(() => undefined);
          }
        }
        const capacity = this.config.sandbox_metrics_points;
        const fh = await open(path, 'w+', 0o600);
        try {
          await fh.write(
            encodeHeader(capacity, this.config.sandbox_metrics_interval_ms, Date.now()),
            0,
            HEADER_SIZE,
            0,
          );
          await fh.truncate(HEADER_SIZE + capacity * RECORD_SIZE);
          await fh.sync();
        } catch (err) {
          // a full disk: closed, or every sample's try would hold one more descriptor
          await fh.close().catch(() => undefined);
          throw err;
        }
        return { fh, capacity, nextSeq: 1n };
      })();
      this.rings.set(vm, p);
      p.catch(() => this.rings.delete(vm));
    }
    return p;
  }

  async append(vm: string, point: MetricsPoint): Promise<void> {
    const ring = await this.openRing(vm);
    const seq = ring.nextSeq++;
    const slot = Number((seq - 1n) % BigInt(ring.capacity));
    await ring.fh.write(encodeRecord(seq, point), 0, RECORD_SIZE, HEADER_SIZE + slot * RECORD_SIZE);
  }

  async read(vm: string, opts: { since?: number; limit?: number }): Promise<MetricsSeries> {
    const buf = await readFile(this.path(vm)).catch(() => undefined);
    if (!buf)
      return {
        capacity: this.config.sandbox_metrics_points,
        interval_ms: this.config.sandbox_metrics_interval_ms,
        points: [],
      };
    const ring = decodeRing(buf);
    let points = ring.records.map((r) => r.point);
    if (opts.since !== undefined) points = points.filter((p) => p.t_ms > opts.since!);
    if (opts.limit !== undefined) points = points.slice(-opts.limit);
    return { capacity: ring.capacity, interval_ms: ring.interval_ms, points };
  }

  async close(vm: string): Promise<void> {
    const p = this.rings.get(vm);
    this.rings.delete(vm);
    if (p) await (await p).fh.close().catch(() => undefined);
  }
}
