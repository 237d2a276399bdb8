import { expect } from 'chai';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { findHelpers } from '../../src/adapters/agent/fs-kept-processes.js';
import { startLocalAgent } from '../../src/adapters/hypervisor/fake/local-agent-process.js';
import { tempDir } from '../helpers/daemon.js';
import { call, ndjson } from '../helpers/http.js';
import { poll } from '../helpers/wait.js';

const MIB = 1 << 20;

/** Starts svc-keep on `cmd` (`sh -c`) journaling into `dir`; resolves once exit.json is there. */
async function keep(dir: string, cap: number, segment: number, cmd: string, code = 0): Promise<void> {
  const helpers = findHelpers();
  if (!helpers) throw new Error('svc-keep is not built (npm run build:agent)');
  const answer = await new Promise<string>((resolve, reject) => {
    const child = spawn(join(helpers, 'svc-keep'), [dir, String(cap), String(segment), '--', 'sh', '-c', cmd], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    let text = '';
    child.stdout.on('data', (d: Buffer) => (text += d.toString()));
    child.once('error', reject);
    child.stdout.once('close', () => resolve(text));
  });
  expect(answer).to.match(/^ok \d+ \d+\n/);
  await poll(() => existsSync(join(dir, 'exit.json')), { ms: 15_000 });
  expect(JSON.parse(readFileSync(join(dir, 'exit.json'), 'utf8'))).to.include({ code });
}

/** The stream's segments: their first offsets and sizes, oldest first. */
function segments(dir: string, stream = 'stdout'): { start: number; size: number; path: string }[] {
  return readdirSync(dir)
    .filter((n) => n.startsWith(`${stream}.`))
    .map((n) => ({ start: Number(n.slice(stream.length + 1)), size: statSync(join(dir, n)).size, path: join(dir, n) }))
    .sort((a, b) => a.start - b.start);
}

describe('svc-keep: the journal of a durable process', function () {
  this.timeout(30_000);

  it('journals a pipe byte for byte across segments, stdout and stderr apart', async () => {
    const dir = tempDir('svc-keep-');
    // 3 MiB and 5 bytes of a repeating pattern on stdout; a line on stderr
    await keep(dir, 16 * MIB, MIB, `seq 1 1000000 | head -c ${3 * MIB + 5}; echo oops >&2`);
    const expected = execFileSync('sh', ['-c', `seq 1 1000000 | head -c ${3 * MIB + 5}`], { maxBuffer: 8 * MIB });
    const segs = segments(dir);
    expect(segs.map((s) => [s.start, s.size])).to.deep.equal([
      [0, MIB],
      [MIB, MIB],
      [2 * MIB, MIB],
      [3 * MIB, 5],
    ]);
    expect(Buffer.concat(segs.map((s) => readFileSync(s.path))).equals(expected)).to.equal(true);
    expect(segments(dir, 'stderr').map((s) => readFileSync(s.path, 'utf8'))).to.deep.equal(['oops\n']);
  });

  it('drops its oldest segments past its cap, the offsets going on', async () => {
    const dir = tempDir('svc-keep-');
    await keep(dir, 256 * 1024, 64 * 1024, `head -c ${MIB} /dev/zero | tr '\\0' a; printf end`);
    const segs = segments(dir);
    expect(segs.at(-1)).to.deep.include({ start: MIB, size: 3 });
    expect(readFileSync(segs.at(-1)!.path, 'utf8')).to.equal('end');
    expect(segs.reduce((n, s) => n + s.size, 0)).to.be.at.most(256 * 1024 + 3);
    for (let i = 1; i < segs.length; i++) expect(segs[i].start).to.equal(segs[i - 1].start + segs[i - 1].size);
  });

  describe('on a full disk (a tmpfs of 512 KiB)', () => {
    let dir: string;
    beforeEach(function () {
      if (process.getuid?.() !== 0) this.skip(); // mounting a tmpfs needs root; CI runs as root
      dir = tempDir('svc-keep-full-');
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=512k', 'tmpfs', dir]);
    });
    afterEach(() => {
      if (dir) execFileSync('umount', [dir]);
    });

    it('makes room with its own oldest bytes: the newest are kept, with no gap and no empty segment', async () => {
      await keep(dir, 16 * MIB, 64 * 1024, `head -c ${2 * MIB} /dev/zero | tr '\\0' a; printf tail`);
      const segs = segments(dir);
      const shown = JSON.stringify(segs.map((s) => [s.start, s.size]));
      expect(segs.at(-1), shown).to.deep.include({ start: 2 * MIB, size: 4 });
      expect(readFileSync(segs.at(-1)!.path, 'utf8')).to.equal('tail');
      expect(
        segs.every((s) => s.size > 0),
        shown,
      ).to.equal(true);
      expect(
        segs.reduce((n, s) => n + s.size, 0),
        shown,
      ).to.be.within(256 * 1024, 512 * 1024);
      for (let i = 1; i < segs.length; i++) expect(segs[i].start, shown).to.equal(segs[i - 1].start + segs[i - 1].size);
      for (const s of segs.slice(0, -1)) expect(readFileSync(s.path).every((b) => b === 0x61)).to.equal(true);
    });

    it('with nothing of its own to give back, counts what it lost: one empty segment says where the stream is', async () => {
      // the disk is filled by another file; the stream loses its 100 KiB, then the room comes back.
      // The room comes back only once svc-keep has met the last of them (its empty segment at
      // 100 KiB is there): before, bytes could still wait in its pipe (1 MiB) for the room.
      const filler = join(dir, 'filler');
      const lostAll = join(dir, `stdout.${String(100 * 1024).padStart(20, '0')}`);
      await keep(
        dir,
        16 * MIB,
        64 * 1024,
        `head -c 600k /dev/zero > ${filler} 2>/dev/null; head -c 100k /dev/zero | tr '\\0' a; ` +
          `i=0; while [ ! -e ${lostAll} ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done; rm ${filler}; printf tail`,
      );
      const segs = segments(dir);
      expect(segs.map((s) => [s.start, s.size])).to.deep.equal([[100 * 1024, 4]]);
      expect(readFileSync(segs[0].path, 'utf8')).to.equal('tail');
    });

    it('says a gap where a write into a segment with bytes was cut short, before the next byte comes', async () => {
      // 'head' is kept; then the disk is filled by another file and 100 KiB come in one write: the
      // segment's page takes 4092 of them, the rest are lost. The empty segment after them must be
      // there before anything more is written: a follower is told of the gap only by it, and a
      // process may write nothing more (until 2026-12-02 it came with the next byte, and a follower
      // waiting at 4096 was told nothing).
      const a = join(tempDir('svc-keep-a-'), 'a');
      writeFileSync(a, Buffer.alloc(100 * 1024, 'a'));
      const first = join(dir, `stdout.${'0'.repeat(20)}`);
      const lostAll = join(dir, `stdout.${String(4 + 100 * 1024).padStart(20, '0')}`);
      const filler = join(dir, 'filler');
      await keep(
        dir,
        16 * MIB,
        64 * 1024,
        `printf head; i=0; while [ ! -s ${first} ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done; ` +
          `head -c 600k /dev/zero > ${filler} 2>/dev/null; dd if=${a} bs=${100 * 1024} count=1 2>/dev/null; ` +
          `i=0; while [ ! -e ${lostAll} ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done; ` +
          `[ -e ${lostAll} ] || exit 3; rm ${filler}; printf tail`,
      );
      const segs = segments(dir);
      expect(segs.at(-1)).to.deep.include({ start: 4 + 100 * 1024, size: 4 });
      expect(readFileSync(segs.at(-1)!.path, 'utf8')).to.equal('tail');
    });

    it('says how the process ended when the disk stays full, in the page it reserved, its output kept', async () => {
      // the process fills the disk and leaves it full: exit.json's page was taken at the start; it
      // fills it once its output is in the journal (svc-keep may read the pipe after the disk filled)
      const written = `i=0; while [ "$(cat ${dir}/stdout.* 2>/dev/null | wc -c)" -lt 3 ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done`;
      await keep(
        dir,
        16 * MIB,
        64 * 1024,
        `printf out; ${written}; head -c 600k /dev/zero > ${join(dir, 'filler')} 2>/dev/null; exit 7`,
        7,
      );
      expect(segments(dir).map((s) => [s.start, s.size])).to.deep.equal([[0, 3]]);
      expect(readdirSync(dir).filter((n) => n.startsWith('exit.json'))).to.deep.equal(['exit.json']);
    });

    it('says how a process with no output to give back ended on a full disk', async () => {
      // nothing of its own to drop for room: before the reserved page it ended as lost
      await keep(dir, 16 * MIB, 64 * 1024, `head -c 600k /dev/zero > ${join(dir, 'filler')} 2>/dev/null; exit 9`, 9);
      expect(segments(dir)).to.deep.equal([]);
      expect(JSON.parse(readFileSync(join(dir, 'exit.json'), 'utf8'))).to.have.keys('code', 'ended_at_ms');
    });

    it("lets an agent's follower reading as the disk fills get each byte at its offset and each gap said", async () => {
      // the agent's state (its processes' journals) on a tmpfs of its own; its log outside it
      const base = tempDir('svc-keep-agent-');
      const state = join(base, 'guest', 'var-lib-svc');
      mkdirSync(state, { recursive: true });
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=512k', 'tmpfs', state]);
      const agent = await startLocalAgent(base);
      try {
        const t = { port: agent.port };
        const filler = join(state, 'filler');
        // The room comes back once svc-keep has met the last lost byte (its empty segment after
        // them is there): its pipe holds 1 MiB, so all 100 KiB could wait there for the room.
        const lostAll = `stdout.${String(4 + 100 * 1024).padStart(20, '0')}`;
        const script =
          `printf head; sleep 0.3; head -c 600k /dev/zero > ${filler} 2>/dev/null; head -c 100k /dev/zero | tr '\\0' a; ` +
          `i=0; while ! find ${state} -name ${lostAll} | grep -q . && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done; ` +
          `rm ${filler}; printf tail`;
        const expected = Buffer.concat([Buffer.from('head'), Buffer.alloc(100 * 1024, 'a'), Buffer.from('tail')]);
        const started = await call(t, 'POST', '/processes', { cmd: 'sh', args: ['-c', script] });
        expect(started.status, started.text).to.equal(201);
        const out = await call(t, 'GET', `/processes/${started.json.id}/output?follow=1`);
        let pos = 0;
        const frames = ndjson(out.text);
        for (const f of frames) {
          if (f.truncated) {
            const before = (f.truncated as { before: number }).before;
            expect(before, 'a gap goes forward').to.be.above(pos);
            pos = before;
          } else if (typeof f.data === 'string') {
            const bytes = Buffer.from(f.data, f.encoding === 'base64' ? 'base64' : 'utf8');
            expect(f.offset, 'each frame where the last one ended').to.equal(pos);
            expect(bytes.equals(expected.subarray(pos, pos + bytes.length)), `the bytes at ${pos}`).to.equal(true);
            pos += bytes.length;
          }
        }
        expect(pos).to.equal(expected.length);
        expect(frames.at(-1)).to.include({ exit_code: 0 });
        expect(
          frames.some((f) => f.truncated),
          'the lost bytes are said',
        ).to.equal(true);
      } finally {
        await agent.stop();
        execFileSync('umount', ['-l', state]);
      }
    });
  });
});
