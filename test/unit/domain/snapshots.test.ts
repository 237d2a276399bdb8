import { expect } from 'chai';
import {
  assertSnapshotName,
  nextSnapshotName,
  parseSnapshotRequest,
  type VmSnapshot,
} from '../../../src/domain/snapshots.js';

const snap = (name: string): VmSnapshot => ({
  name,
  created_at: '2026-12-04T00:00:00.000Z',
  memory: true,
  taken_from: 'running',
  cpus: 1,
  memory_mb: 256,
  disk_gb: 2,
});

describe('domain/snapshots', () => {
  it('reads {name?, description?} and nothing else', () => {
    expect(parseSnapshotRequest(undefined)).to.deep.equal({});
    expect(parseSnapshotRequest({})).to.deep.equal({});
    expect(parseSnapshotRequest({ name: 'v1.2_rc-3', description: 'before the upgrade' })).to.deep.equal({
      name: 'v1.2_rc-3',
      description: 'before the upgrade',
    });
    expect(() => parseSnapshotRequest([])).to.throw(/body must be a JSON object/);
    expect(() => parseSnapshotRequest('s1')).to.throw(/body must be a JSON object/);
    expect(() => parseSnapshotRequest({ name: 's', memory: false })).to.throw(/unknown field memory/);
    expect(() => parseSnapshotRequest({ description: 7 })).to.throw(/description must be text/);
    expect(() => parseSnapshotRequest({ description: 'x'.repeat(513) })).to.throw(/at most 512/);
    expect(() => parseSnapshotRequest({ description: 'bell\x07' })).to.throw(/description must be text/);
  });

  it('takes names a file system and a URL path can hold as they are', () => {
    for (const ok of ['a', '1', 'snap-1', 'v1.0', 'x_y', 'a'.repeat(63)]) expect(assertSnapshotName(ok)).to.equal(ok);
    for (const bad of ['', '.', '..', '.hidden', '-x', 'A', 'a/b', 'a b', 'a'.repeat(64), 'é', 7, null])
      expect(() => assertSnapshotName(bad), String(bad)).to.throw(/invalid snapshot name/);
  });

  it('names an unnamed snapshot snap-N, one past the highest N', () => {
    expect(nextSnapshotName([])).to.equal('snap-1');
    expect(nextSnapshotName([snap('snap-1'), snap('x'), snap('snap-7'), snap('snap-2')])).to.equal('snap-8');
    expect(nextSnapshotName([snap('snap-01x'), snap('snap-')])).to.equal('snap-1');
  });
});
