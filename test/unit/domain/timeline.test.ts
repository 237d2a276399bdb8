import { expect } from 'chai';
import { type ProcessInfo } from '../../../src/domain/processes.js';
import { parseCursor, type WatchInfo } from '../../../src/domain/watches.js';
import {
  FIRST_TIMELINE,
  MAX_KEPT_PROCESSES,
  formatCursor,
  formatFrom,
  keptOutputOf,
  movedBack,
  offeredKept,
  offeredTimeline,
  resumeOn,
  revertedTimeline,
  timelineOf,
} from '../../../src/domain/timeline.js';

const info = (id: string, bytes: ProcessInfo['bytes']): ProcessInfo => ({
  id,
  pid: 1,
  cmd: 'sh',
  args: [],
  pty: false,
  stdin: false,
  started_at: '2026-12-04T00:00:00Z',
  state: 'running',
  bytes,
});

const watch = (id: string, cursor?: string): WatchInfo => ({
  id,
  path: '/srv',
  recursive: false,
  started_at: '2026-12-04T00:00:00Z',
  state: 'running',
  ...(cursor ? { cursor } : {}),
});

describe('timelines: where a reader reads on after a revert', () => {
  const t1 = revertedTimeline(undefined, { p1: { stdout: 100, stderr: 7 } }, '0123456789ab');

  it('a revert starts a new timeline that shares the noted bytes with the one its snapshot was on', () => {
    expect(timelineOf(undefined)).to.equal(FIRST_TIMELINE);
    expect(t1).to.deep.equal({ id: 't0123456789ab', before: 't0', kept: { p1: { stdout: 100, stderr: 7 } } });
    expect(revertedTimeline('t0123456789ab', undefined, 'ffffffffffff')).to.deep.equal({
      id: 'tffffffffffff',
      before: 't0123456789ab',
    });
  });

  it('reads on where it is for a reader on the timeline now, or one that names none', () => {
    expect(resumeOn(t1, 't0123456789ab', 'p1', { stdout: 500 })).to.deep.equal({ from: { stdout: 500 } });
    expect(resumeOn(t1, undefined, 'p1', { all: 500 })).to.deep.equal({ from: { all: 500 } });
    expect(resumeOn(undefined, 't0', 'p1', { all: 5 })).to.deep.equal({ from: { all: 5 } });
  });

  it('moves a reader of the timeline left back to the shared bytes, and says so', () => {
    expect(resumeOn(t1, 't0', 'p1', { stdout: 500, stderr: 3 })).to.deep.equal({
      from: { stdout: 100, stderr: 3 },
      reverted: { stdout: 100 },
    });
    // `all` reads every stream from one offset: each stream then from its own.
    expect(resumeOn(t1, 't0', 'p1', { all: 50 })).to.deep.equal({
      from: { stdout: 50, stderr: 7 },
      reverted: { stderr: 7 },
    });
    expect(resumeOn(t1, 't0', 'p1', { all: 500 })).to.deep.equal({
      from: { stdout: 100, stderr: 7 },
      reverted: { stdout: 100, stderr: 7 },
    });
    // Below what is shared: nothing to say, the bytes it read are the reverted guest's too.
    expect(resumeOn(t1, 't0', 'p1', { stdout: 90, stderr: 7 })).to.deep.equal({ from: { stdout: 90, stderr: 7 } });
  });

  it('reads again from 0 what it cannot know was shared: another process, another timeline', () => {
    expect(resumeOn(t1, 't0', 'p2', { stdout: 40 })).to.deep.equal({ from: { stdout: 0 }, reverted: { stdout: 0 } });
    expect(resumeOn(t1, 't0', 'p2', { all: 40 })).to.deep.equal({ from: { all: 0 }, reverted: { all: 0 } });
    expect(resumeOn(t1, 'tabc', 'p1', { stdout: 40 })).to.deep.equal({
      from: { stdout: 0 },
      reverted: { stdout: 0 },
    });
    expect(resumeOn(t1, 'tabc', 'p1', {})).to.deep.equal({ from: {} });
  });

  it('notes the newest processes that wrote, at most MAX_KEPT_PROCESSES', () => {
    expect(keptOutputOf([])).to.equal(undefined);
    expect(keptOutputOf([info('p1', {}), info('p2', { pty: 3 })])).to.deep.equal({ p2: { pty: 3 } });
    const many = Array.from({ length: MAX_KEPT_PROCESSES + 6 }, (_, i) => info(`p${i + 1}`, { stdout: i }));
    const kept = keptOutputOf(many)!;
    expect(Object.keys(kept)).to.have.length(MAX_KEPT_PROCESSES);
    expect(kept).to.have.property(`p${MAX_KEPT_PROCESSES + 6}`);
    expect(kept).to.not.have.property('p6');
  });

  it('notes each watch’s journal as its stdout, the newest MAX_KEPT_PROCESSES of them', () => {
    expect(keptOutputOf([], [watch('w1', 'w1:120'), watch('w2')])).to.deep.equal({ w1: { stdout: 120 } });
    // a cursor of another watch, or none that parses, notes nothing
    expect(keptOutputOf([info('p1', { stdout: 4 })], [watch('w3', 'w4:9'), watch('w5', 'x')])).to.deep.equal({
      p1: { stdout: 4 },
    });
    const many = Array.from({ length: MAX_KEPT_PROCESSES + 2 }, (_, i) => watch(`w${i + 1}`, `w${i + 1}:${i}`));
    const kept = keptOutputOf([info('p1', { stdout: 1 })], many)!;
    expect(Object.keys(kept)).to.have.length(MAX_KEPT_PROCESSES + 1);
    expect(kept).to.not.have.property('w2');
  });

  it('says a watch cursor’s timeline after the first, and reads it back', () => {
    expect(formatCursor('w3', 1200, FIRST_TIMELINE)).to.equal('w3:1200');
    expect(formatCursor('w3', 1200, undefined)).to.equal('w3:1200');
    expect(formatCursor('w3', 1200, t1.id)).to.equal('w3:1200@t0123456789ab');
    expect(parseCursor(formatCursor('w3', 1200, t1.id))).to.deep.equal({
      watch: 'w3',
      offset: 1200,
      timeline: 't0123456789ab',
    });
    expect(() => parseCursor('w3:1@../x')).to.throw(/not valid/);
    // a cursor of the first timeline, moved back as an output offset is
    expect(
      resumeOn(revertedTimeline(undefined, { w3: { stdout: 80 } }, 'aa'), 't0', 'w3', { stdout: 200 }),
    ).to.deep.equal({ from: { stdout: 80 }, reverted: { stdout: 80 } });
  });

  it("moves a reader's offsets as a reverted frame says", () => {
    const pos = { stdout: 50, stderr: 9 };
    expect(movedBack(pos, undefined, { stdout: 40 })).to.equal(undefined);
    expect(pos).to.deep.equal({ stdout: 40, stderr: 9 });
    expect(movedBack(pos, 7, { all: 0 })).to.equal(0);
    expect(pos).to.deep.equal({});
  });

  it('formats a from as the agent takes it', () => {
    expect(formatFrom({ stdout: 1, stderr: 2 })).to.equal('stdout:1,stderr:2');
    expect(formatFrom({ all: 9 })).to.equal('9');
    expect(formatFrom({})).to.equal(undefined);
  });

  it('keeps what a peer offers only when well formed', () => {
    expect(offeredTimeline(t1)).to.deep.equal(t1);
    expect(offeredTimeline({ id: '../x' })).to.equal(undefined);
    expect(offeredTimeline({ id: 't1', before: 7 })).to.deep.equal({ id: 't1' });
    expect(offeredTimeline({ id: 't1', kept: { p1: { stdout: -1 } } })).to.deep.equal({ id: 't1' });
    expect(offeredKept({ p1: { stdout: 1, other: 2 } })).to.equal(undefined);
    expect(offeredKept({ x: { stdout: 1 } })).to.equal(undefined);
    expect(offeredKept([1])).to.equal(undefined);
    const many = Object.fromEntries(Array.from({ length: MAX_KEPT_PROCESSES + 1 }, (_, i) => [`p${i + 1}`, {}]));
    expect(offeredKept(many)).to.equal(undefined);
    // as many watches again as processes, each counted apart
    const both = {
      ...Object.fromEntries(Array.from({ length: MAX_KEPT_PROCESSES }, (_, i) => [`p${i + 1}`, { stdout: 1 }])),
      ...Object.fromEntries(Array.from({ length: MAX_KEPT_PROCESSES }, (_, i) => [`w${i + 1}`, { stdout: 2 }])),
    };
    expect(offeredKept(both)).to.deep.equal(both);
    expect(offeredKept({ ...both, w999: { stdout: 1 } })).to.equal(undefined);
  });
});
