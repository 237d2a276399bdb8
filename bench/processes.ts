// BENCH_ONLY=processes: durable processes on a real (TCG) guest, through the daemon.
import { mkdtempSync, rmSync } from 'node:fs';
import { get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SvcClient } from '../src/adapters/client/svc-client.js';
import { fmt, minimalQemu, startSvcd, stats, type Daemon, type Row } from './lib.js';

/** Bytes the throughput rows move (less than a stream's 16 MiB journal, so none is dropped). */
const MIB = Number(process.env.BENCH_PROC_MIB ?? 12);
const ROUNDS = Number(process.env.BENCH_PROC_ROUNDS ?? 3);
/** The guest's vCPUs: with one, the writer, the keeper, the agent and the guest's network take turns on it. */
const CPUS = Number(process.env.BENCH_PROC_CPUS ?? 1);
/** An experiment: the journals on a tmpfs mounted over their folder (not what svc ships: they are on the guest's disk). */
const JOURNAL_TMPFS = process.env.BENCH_PROC_JOURNAL_TMPFS === '1';
const JOURNALS = '/var/lib/svc/processes';

/** Reads process `id`'s output on guest `g` to its end (`follow`: as it comes); throws unless it was MIB MiB. */
async function readOutput(c: SvcClient, id: string, follow: boolean): Promise<{ frames: number }> {
  let got = 0;
  let frames = 0;
  for await (const f of c.processOutput('g', id, { follow })) {
    if ('truncated' in f) throw new Error(`a truncation at ${f.truncated.before} (follow: ${follow}): bytes skipped`);
    if ('stream' in f) {
      got += Buffer.byteLength(f.data);
      frames++;
    }
  }
  if (got !== MIB << 20) throw new Error(`read ${got} bytes of ${MIB << 20} (follow: ${follow})`);
  return { frames };
}

/**
 * Reads process `id`'s output straight from the guest's agent (its host port, no daemon), in the
 * form the daemon asks for (`raw`: the bytes in pieces, framed on the host): the most the guest can
 * send. Throws unless at least MIB MiB came (the pieces' heads are a few bytes more).
 */
function readDirect(agentPort: number, id: string, follow: boolean): Promise<void> {
  return new Promise((resolve, reject) => {
    const q = `raw=1${follow ? '&follow=1' : ''}`;
    get({ host: '127.0.0.1', port: agentPort, path: `/processes/${id}/output?${q}` }, (res) => {
      let n = 0;
      res.on('data', (c: Buffer) => (n += c.length));
      res.on('error', reject);
      res.on('end', () =>
        res.statusCode === 200 && n >= MIB << 20
          ? resolve()
          : reject(new Error(`direct read: status ${res.statusCode}, ${n} bytes (follow: ${follow})`)),
      );
    }).on('error', reject);
  });
}

/**
 * What a durable process costs, in one run on one minimal guest: starting one (beside an exec of
 * the same command), the rate its output reaches a follower through the daemon beside the rate the
 * same writer reaches a reader inside the guest, and how soon a line the process writes is a frame
 * at the client.
 */
export async function processBenchmarks(row: Row, results: Record<string, unknown>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-proc-'));
  let d: Daemon | undefined;
  try {
    d = await startSvcd(dir, minimalQemu({ memory_mb: 512 }));
    const c = d.client;
    await c.create({ name: 'g', cpus: CPUS });
    if (JOURNAL_TMPFS)
      await c.exec('g', {
        cmd: 'sh',
        args: ['-c', `mkdir -p ${JOURNALS} && mount -t tmpfs -o size=128m tmpfs ${JOURNALS}`],
      });

    // 1. start: POST /processes (a keeper, its folder, meta.json) against exec of the same `true`
    const start: number[] = [];
    const exec: number[] = [];
    for (let i = 0; i < 60; i++) {
      let t0 = performance.now();
      await c.startProcess('g', { cmd: 'true' });
      if (i >= 10) start.push(performance.now() - t0);
      t0 = performance.now();
      await c.exec('g', { cmd: 'true', args: [] });
      if (i >= 10) exec.push(performance.now() - t0);
    }
    const [s, e] = [stats(start), stats(exec)];
    row(
      'start a detached process (`true`), TCG guest, through the daemon',
      `p50 ${fmt(s.p50, 1)} ms, p95 ${fmt(s.p95, 1)} ms (n=50)`,
      `exec \`true\`: p50 ${fmt(e.p50, 1)} ms`,
    );

    // 2. throughput: the same writer read in the guest, and followed through the daemon
    const writer = `head -c ${MIB << 20} /dev/zero | tr '\\0' a`;
    const agentPort = (await c.get('g')).agent_port!;
    const direct: number[] = [];
    const toFile: number[] = [];
    const followed: number[] = [];
    const followedDirect: number[] = [];
    // frames the follower got: the daemon cuts pieces to 64 KiB, so more than MIB * 16 says the
    // agent read small pieces (a follower woken for each of the keeper's writes)
    const frameCounts: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const r = await c.exec('g', {
        cmd: 'sh',
        // /proc/uptime: busybox's date has no %N; hundredths of a second are enough for seconds
        args: ['-c', `read a _ < /proc/uptime; ${writer} | cat > /dev/null; read b _ < /proc/uptime; echo "$a $b"`],
        timeoutMs: 600_000,
      });
      const [a, b] = r.stdout.trim().split(' ').map(Number);
      direct.push((b - a) * 1000);
      // the same writer into a file beside the journals, no keeper: what their file system costs it
      const f = await c.exec('g', {
        cmd: 'sh',
        args: [
          '-c',
          `read a _ < /proc/uptime; ${writer} > ${JOURNALS}/bench-file; read b _ < /proc/uptime; rm ${JOURNALS}/bench-file; echo "$a $b"`,
        ],
        timeoutMs: 600_000,
      });
      const [fa, fb] = f.stdout.trim().split(' ').map(Number);
      toFile.push((fb - fa) * 1000);
      const t0 = performance.now();
      const p = await c.startProcess('g', { cmd: 'sh', args: ['-c', writer] });
      const { frames } = await readOutput(c, p.id, true);
      followed.push(performance.now() - t0);
      frameCounts.push(frames);
      // the same, followed straight from the agent (no daemon): what the daemon's hop costs
      const t1 = performance.now();
      const q = await c.startProcess('g', { cmd: 'sh', args: ['-c', writer] });
      await readDirect(agentPort, q.id, true);
      followedDirect.push(performance.now() - t1);
    }
    // the same writer journaled with nobody following, timed by the guest's clock around the writer
    // itself (not the record's start and end: the keeper's start is not the journal's cost); its end
    // is awaited in the guest, not by asking the daemon every half second (each ask costs the one
    // vCPU an agent call while the writer runs)
    const alone: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const p = await c.startProcess('g', {
        cmd: 'sh',
        args: ['-c', `read a _ < /proc/uptime; ${writer}; read b _ < /proc/uptime; echo "$a $b" >&2`],
      });
      await c.exec('g', {
        cmd: 'sh',
        args: ['-c', `while kill -0 ${p.pid} 2>/dev/null; do sleep 1; done`],
        timeoutMs: 600_000,
      });
      let err = '';
      for await (const f of c.processOutput('g', p.id, { follow: false }))
        if ('stream' in f && f.stream === 'stderr')
          err += f.encoding === 'base64' ? Buffer.from(f.data, 'base64').toString() : f.data;
      const [a, b] = err.trim().split(' ').map(Number);
      if (!(b >= a)) throw new Error(`no times from the writer: ${JSON.stringify(err)}`);
      alone.push((b - a) * 1000);
    }
    // a finished process's output read through the daemon, against a cp of a file of the same bytes
    const ended: number[] = [];
    const endedDirect: number[] = [];
    const copied: number[] = [];
    await c.exec('g', { cmd: 'sh', args: ['-c', `${writer} > /tmp/bench-output`], timeoutMs: 600_000 });
    const done = (await c.processes('g'))
      .filter((p) => p.state === 'ended' && p.bytes?.stdout === MIB << 20 && !p.bytes.stderr)
      .at(-1);
    if (!done) throw new Error('no ended writer to read');
    for (let i = 0; i < ROUNDS; i++) {
      let t0 = performance.now();
      await readOutput(c, done.id, false);
      ended.push(performance.now() - t0);
      t0 = performance.now();
      await readDirect(agentPort, done.id, false);
      endedDirect.push(performance.now() - t0);
      t0 = performance.now();
      let n = 0;
      for await (const b of (await c.download('g', '/tmp/bench-output')).body) n += (b as Buffer).length;
      copied.push(performance.now() - t0);
      if (n !== MIB << 20) throw new Error(`copied ${n} bytes of ${MIB << 20}`);
    }
    const [dm, fm, am] = [stats(direct).p50, stats(followed).p50, stats(alone).p50];
    const [em, cm, ed, fd] = [stats(ended).p50, stats(copied).p50, stats(endedDirect).p50, stats(followedDirect).p50];
    const ratio = dm / fm;
    row(
      `a ${MIB} MiB writer read in the guest (\`| cat\`; the guest's own clock, median of ${ROUNDS})`,
      `${fmt(MIB / (dm / 1000), 1)} MiB/s`,
      '',
    );
    const tm = stats(toFile).p50;
    row(
      `the same writer into a file in the journals' folder, no keeper (${JOURNAL_TMPFS ? 'a tmpfs mounted there: BENCH_PROC_JOURNAL_TMPFS' : 'the guest’s disk'}; the guest's clock)`,
      `${fmt(MIB / (tm / 1000), 1)} MiB/s`,
      `${fmt((dm / tm) * 100, 0)}% of the direct read: what the file system costs the writer`,
    );
    row(
      'the same writer as a durable process with nobody following (the writer alone, by the guest’s clock)',
      `${fmt(MIB / (am / 1000), 1)} MiB/s`,
      `${fmt((dm / am) * 100, 0)}% of the direct read: the journal's own cost`,
    );
    row(
      'the same writer as a durable process, followed through the daemon from its start (start, journal, agent, daemon, client)',
      `${fmt(MIB / (fm / 1000), 1)} MiB/s`,
      `${fmt(ratio * 100, 0)}% of the direct read (goal >= 90%: ${ratio >= 0.9 ? 'met' : 'missed'}); ${fmt(stats(frameCounts).p50, 0)} frames (${MIB * 16} at least)`,
    );

    row(
      'the same writer followed straight from the guest’s agent (no daemon: the most the guest sends)',
      `${fmt(MIB / (fd / 1000), 1)} MiB/s`,
      `through the daemon: ${fmt((fd / fm) * 100, 0)}% of it (the daemon's own cost; goal >= 90%: ${fd / fm >= 0.9 ? 'met' : 'missed'})`,
    );
    row(
      `the ${MIB} MiB output of a process that has ended, read straight from the guest's agent (no daemon)`,
      `${fmt(MIB / (ed / 1000), 1)} MiB/s`,
      '',
    );
    row(
      `the ${MIB} MiB output of a process that has ended, read through the daemon (median of ${ROUNDS})`,
      `${fmt(MIB / (em / 1000), 1)} MiB/s`,
      `${fmt((ed / em) * 100, 0)}% of the agent's own rate (goal >= 90%: ${ed / em >= 0.9 ? 'met' : 'missed'}); ${fmt((cm / em) * 100, 0)}% of a cp of the same bytes out of the guest (${fmt(MIB / (cm / 1000), 1)} MiB/s)`,
    );

    // 3. follow latency: a line into a cat's input, and the time until its echo is a frame here,
    //    less half the stdin call's own round trip (the way in)
    const cat = await c.startProcess('g', { cmd: 'cat', stdin: true });
    const ac = new AbortController();
    const frames = c.processOutput('g', cat.id, { signal: ac.signal })[Symbol.asyncIterator]();
    const echo: number[] = [];
    const post: number[] = [];
    for (let i = 0; i < 60; i++) {
      const t0 = performance.now();
      await c.sendStdin('g', cat.id, `line ${i}\n`);
      const t1 = performance.now();
      for (;;) {
        const n = await frames.next();
        if (n.done || ('stream' in n.value && n.value.data.includes(`line ${i}\n`))) break;
      }
      if (i >= 10) {
        echo.push(performance.now() - t0);
        post.push(t1 - t0);
      }
    }
    ac.abort();
    await c.removeProcess('g', cat.id);
    const [ec, po] = [stats(echo), stats(post)];
    const follow = ec.p50 - po.p50 / 2;
    row(
      'a line into a process and its echo back as a frame (stdin POST, cat, journal, follow)',
      `p50 ${fmt(ec.p50, 1)} ms, p95 ${fmt(ec.p95, 1)} ms (n=50)`,
      `stdin POST alone p50 ${fmt(po.p50, 1)} ms`,
    );
    row(
      'follow latency: written in the guest to a frame at the client (the echo less half the POST)',
      `p50 ${fmt(follow, 1)} ms`,
      '',
    );
    results.processes = {
      start_ms: s,
      exec_true_ms: e,
      throughput: {
        mib: MIB,
        rounds: ROUNDS,
        direct_ms: direct,
        journal_fs: JOURNAL_TMPFS ? 'tmpfs (experiment)' : 'disk',
        to_file_ms: toFile,
        followed_ms: followed,
        alone_ms: alone,
        ended_read_ms: ended,
        ended_read_direct_ms: endedDirect,
        followed_direct_ms: followedDirect,
        cp_out_ms: copied,
        ratio,
        frames: frameCounts,
      },
      echo_ms: ec,
      stdin_post_ms: po,
      follow_latency_p50_ms: follow,
    };
  } finally {
    if (d) {
      await d.client.delete('g').catch(() => undefined);
      await d.stop();
    }
    rmSync(dir, { recursive: true, force: true });
  }
}
