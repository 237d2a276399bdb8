import { expect } from 'chai';
import {
  assertMovable,
  isMovePath,
  MOVE_FILE_NAME,
  moveByteLimit,
  offeredRecord,
  parseMoveRequest,
} from '../../../src/domain/move.js';
import type { VmRecord } from '../../../src/domain/vm.js';

const snap = { created_at: '', memory: false, taken_from: 'stopped' as const, cpus: 1, memory_mb: 512, disk_gb: 4 };

const rec = (o: Partial<VmRecord> = {}): VmRecord =>
  ({
    name: 'box',
    status: 'stopped',
    persistent: true,
    cpus: 1,
    memory_mb: 512,
    disk_gb: 4,
    image: 'minimal',
    ip: '',
    ssh_port: 0,
    agent_port: 0,
    agent_cid: 0,
    forwards: [],
    tags: {},
    mounts: [],
    metrics_enabled: false,
    created_at: '',
    updated_at: '',
    egress: { mode: 'allow', allow: [], deny: [] },
    ...o,
  }) as VmRecord;

describe('domain/move', () => {
  it('reads {node} and nothing else', () => {
    expect(parseMoveRequest({ node: 'n2' })).to.deep.equal({ node: 'n2' });
    expect(() => parseMoveRequest([])).to.throw(/move body must be a JSON object/);
    // Without a node the placement rule picks one.
    expect(parseMoveRequest({})).to.deep.equal({});
    expect(parseMoveRequest(undefined)).to.deep.equal({});
    expect(() => parseMoveRequest({ node: 'N 2' })).to.throw(/node must be a node name/);
    expect(() => parseMoveRequest({ node: 'n2', live: true })).to.throw(/unknown move field\(s\): live/);
  });

  it('carries stopped and suspended VMs, moves a running or paused one when asked, and none with what is its host’s alone', () => {
    assertMovable(rec());
    assertMovable(rec({ status: 'suspended' }));
    for (const status of ['running', 'paused', 'creating', 'error'] as const)
      expect(() => assertMovable(rec({ status }))).to.throw(
        new RegExp(`is ${status}; a vm is carried stopped or suspended`),
      );
    // Its node suspends a running VM for the move (persistent: an ephemeral one cannot be suspended).
    assertMovable(rec({ status: 'running', persistent: true }), { running: true });
    assertMovable(rec({ status: 'stopped' }), { running: true });
    expect(() => assertMovable(rec({ status: 'running', persistent: false }), { running: true })).to.throw(
      /is ephemeral: it cannot be suspended for a move/,
    );
    // A paused one too (suspended, restored there and paused again), when persistent.
    assertMovable(rec({ status: 'paused', persistent: true }), { running: true });
    expect(() => assertMovable(rec({ status: 'paused', persistent: false }), { running: true })).to.throw(
      /is ephemeral: it cannot be suspended for a move/,
    );
    expect(() => assertMovable(rec({ status: 'creating' }), { running: true })).to.throw(
      /is creating; a vm moves running or paused \(suspended for the move, restored there\), stopped or suspended$/,
    );
    expect(() =>
      assertMovable(rec({ status: 'running', persistent: true, mounts: [{ host: '/srv', guest: '/s' }] }), {
        running: true,
      }),
    ).to.throw(/shares host folders/);
    expect(() => assertMovable(rec({ pool: 'tpl' }))).to.throw(/warm pool member/);
    expect(() => assertMovable(rec({ deleting: true }))).to.throw(/being deleted/);
    expect(() => assertMovable(rec({ mounts: [{ host: '/srv/data', guest: '/data' }] }))).to.throw(
      /shares host folders \(\/srv\/data\)/,
    );
    expect(() => assertMovable(rec({ overlay_ip: '10.1.0.5/24' }))).to.throw(/overlay network/);
    // Snapshots move with their VM (docs/snapshots.md).
    assertMovable(rec({ snapshots: [{ name: 'a', ...snap }] }));
  });

  it('takes an offer only with its fields, and drops what belonged to the sending host', () => {
    const offer = offeredRecord({
      from: 'n1',
      image_digest: 'sha256:ab',
      record: rec({ status: 'suspended', ssh_port: 2222, agent_port: 7000, pid: 42, agent_socket: '/x' }),
    });
    expect(offer.from).to.equal('n1');
    expect(offer.record).to.include({ name: 'box', ssh_port: 0, agent_port: 0, status: 'suspended' });
    expect(offer.record).not.to.have.property('pid');
    expect(offer.record).not.to.have.property('agent_socket');
    for (const bad of [
      null,
      {},
      { from: 'n1', image_digest: 1, record: rec() },
      { from: 'n1', image_digest: 'x', record: { name: 'x' } },
      { from: 'n1', image_digest: 'x', record: rec({ snapshots: {} as never }) },
      { from: 'n1', image_digest: 'x', record: rec({ snapshots: [{ ...snap, name: 'a', disk_gb: 1e300 }] }) },
      { from: 'n1', image_digest: 'x', record: rec({ snapshots: [{ ...snap, name: 'a', memory_mb: -1 }] }) },
      { from: 'n1', image_digest: 'x', record: rec({ snapshots: Array(33).fill({ ...snap, name: 'a' }) }) },
    ])
      expect(() => offeredRecord(bad)).to.throw(/a move offer must carry/);
  });

  it('carries a timeline and the bytes snapshots noted when well formed, and drops them else', () => {
    const kept = { p1: { stdout: 10 } };
    const carried = offeredRecord({
      from: 'n1',
      image_digest: 'x',
      record: rec({
        timeline: { id: 't0a', before: 't0', kept },
        saved_output: { ...kept, w2: { stdout: 40 } },
        snapshots: [
          { name: 'a', ...snap, kept_output: kept, timeline: 't0a' },
          { name: 'b', ...snap, kept_output: kept },
        ],
      }),
    }).record;
    expect(carried.timeline).to.deep.equal({ id: 't0a', before: 't0', kept });
    expect(carried.saved_output).to.deep.equal({ p1: { stdout: 10 }, w2: { stdout: 40 } });
    expect(carried.snapshots!.map((s) => [s.kept_output, s.timeline])).to.deep.equal([
      [kept, 't0a'],
      [kept, undefined],
    ]);
    const dropped = offeredRecord({
      from: 'n1',
      image_digest: 'x',
      record: rec({
        timeline: { id: '../x' },
        saved_output: kept, // on a timeline that was not kept
        snapshots: [
          { name: 'a', ...snap, kept_output: { p1: { stdout: -5 } } },
          { name: 'b', ...snap, kept_output: kept, timeline: 'nope' },
        ],
      }),
    }).record;
    expect(dropped).to.not.have.any.keys('timeline', 'saved_output');
    const garbled = offeredRecord({
      from: 'n1',
      image_digest: 'x',
      record: rec({ saved_output: { p1: 'x' } as never }),
    });
    expect(garbled.record).to.not.have.property('saved_output');
    for (const s of dropped.snapshots!) expect(s).to.not.have.any.keys('kept_output', 'timeline');
  });

  it('bounds what a move may carry', () => {
    expect(moveByteLimit({ disk_gb: 4, memory_mb: 512 })).to.equal((4 * 1024 + 2 * 512 + 256) * 1024 * 1024);
    // Each snapshot may hold a disk and a memory of its own shape.
    expect(
      moveByteLimit({
        disk_gb: 4,
        memory_mb: 512,
        snapshots: [
          { name: 'a', ...snap, disk_gb: 2, memory_mb: 256 },
          { name: 'b', ...snap },
        ],
      }),
    ).to.equal((4 * 1024 + 2 * 512 + 256 + (2 * 1024 + 2 * 256) + (4 * 1024 + 2 * 512)) * 1024 * 1024);
    for (const ok of ['disk.qcow2', 'snapshots/a/snapshot.json', 'snapshots/a.json', 'snapshots/s-1/base-0a.ram'])
      expect(isMovePath(ok), ok).to.equal(true);
    for (const bad of [
      'a/b',
      'snapshots/../x',
      'snapshots/a/b/c',
      'snapshots/./x',
      'snapshots//x',
      '/x',
      'snapshots/a/',
    ])
      expect(isMovePath(bad), bad).to.equal(false);
    for (const ok of ['disk.qcow2', 'base-0123456789abcdef.qcow2', 'serial.log', '.hidden'])
      expect(MOVE_FILE_NAME.test(ok), ok).to.equal(true);
    for (const bad of ['.', '..', 'a/b', '../x', '', 'x'.repeat(129), 'sp ace'])
      expect(MOVE_FILE_NAME.test(bad), bad).to.equal(false);
  });
});
