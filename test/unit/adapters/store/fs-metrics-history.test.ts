import { expect } from 'chai';
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { buildConfig } from '../../../../src/app/config.js';
import {
  FsMetricsHistory,
  HEADER_SIZE,
  RECORD_SIZE,
  decodeRing,
} from '../../../../src/adapters/store/fs-metrics-history.js';
import type { MetricsPoint } from '../../../../src/domain/events.js';
import { MemoryInstanceStore } from '../../../fakes/fakes.js';
import { tempDir } from '../../../helpers/daemon.js';

class DirStore extends MemoryInstanceStore {
  constructor(private readonly root: string) {
    super();
  }
  override dir(name: string) {
    return join(this.root, name);
  }
}

function point(i: number): MetricsPoint {
  return {
    t_ms: 1000 + i,
    uptime_sec: i,
    load1: i / 10,
    mem_total_bytes: 1 << 30,
    mem_available_bytes: 1 << 29,
    disk_total_bytes: i % 2 ? 100 : undefined,
    disk_free_bytes: i % 2 ? 50 : undefined,
  };
}

describe('adapters/store/FsMetricsHistory (metrics.ring)', () => {
  let root: string;
  const make = (points = 5) =>
    new FsMetricsHistory(
      buildConfig({ sandbox_metrics_points: points, sandbox_metrics_interval: '15s' }, {}),
      new DirStore(root),
    );
  beforeEach(() => {
    root = tempDir('svc-ring-');
    mkdirSync(join(root, 'vm'));
  });

  it('reads as empty before the first sample', async () => {
    expect((await make().read('vm', {})).points).to.deep.equal([]);
  });

  it('has a fixed size, wraps at capacity, and reads oldest first', async () => {
    const h = make(5);
    for (let i = 0; i < 12; i++) await h.append('vm', point(i));
    expect(statSync(join(root, 'vm', 'metrics.ring')).size).to.equal(HEADER_SIZE + 5 * RECORD_SIZE);
    const s = await h.read('vm', {});
    expect(s.capacity).to.equal(5);
    expect(s.interval_ms).to.equal(15000);
    expect(s.points.map((p) => p.uptime_sec)).to.deep.equal([7, 8, 9, 10, 11]);
    expect(s.points[0]).to.deep.equal(point(7));
    expect(s.points[1]).to.deep.equal({
      t_ms: 1008,
      uptime_sec: 8,
      load1: 0.8,
      mem_total_bytes: 1 << 30,
      mem_available_bytes: 1 << 29,
    });
    expect((await h.read('vm', { limit: 2 })).points.map((p) => p.uptime_sec)).to.deep.equal([10, 11]);
    expect((await h.read('vm', { since: 1009 })).points.map((p) => p.uptime_sec)).to.deep.equal([10, 11]);
    await h.close('vm');
  });

  it('continues the sequence after a restart and keeps its own capacity', async () => {
    const h = make(5);
    for (let i = 0; i < 7; i++) await h.append('vm', point(i));
    await h.close('vm');
    const h2 = make(99);
    await h2.append('vm', point(7));
    const s = await h2.read('vm', {});
    expect(s.capacity).to.equal(5);
    expect(s.points.map((p) => p.uptime_sec)).to.deep.equal([3, 4, 5, 6, 7]);
    await h2.close('vm');
  });

  it('skips a torn record (crash mid-write) instead of reading garbage', async () => {
    const h = make(5);
    for (let i = 0; i < 3; i++) await h.append('vm', point(i));
    await h.close('vm');
    const path = join(root, 'vm', 'metrics.ring');
    const fh = await open(path, 'r+');
    await fh.write(Buffer.from([0xde, 0xad]), 0, 2, HEADER_SIZE + RECORD_SIZE + 20);
    await fh.close();
    expect(decodeRing(readFileSync(path)).records.map((r) => r.point.uptime_sec)).to.deep.equal([0, 2]);
  });

  it('sets a corrupt file aside and starts a new ring', async () => {
    writeFileSync(join(root, 'vm', 'metrics.ring'), 'not a ring at all');
    const h = make(3);
    await h.append('vm', point(1));
    expect((await h.read('vm', {})).points).to.have.length(1);
    expect(readFileSync(join(root, 'vm', 'metrics.ring.corrupt'), 'utf8')).to.equal('not a ring at all');
    await h.close('vm');
  });
});
