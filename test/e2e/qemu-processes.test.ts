import { expect } from 'chai';
import { SvcClient } from '../../src/adapters/client/svc-client.js';
import { guestSh, restoreWarm, type TestDaemon } from '../helpers/daemon.js';
import { followNdjson, ndjson } from '../helpers/http.js';
import { expectNumbered, readWithReconnects } from '../helpers/processes.js';
import { startSeededDaemon } from './snapshot-seeds.js';
import { waitFor } from '../helpers/wait.js';

/**
 * A printer of `n 1`, `n 2`, ..., a line every `ms` ms until the file `stop` exists (so it runs
 * through whatever the test does meanwhile), then exit 0. It waits with the shell's own `read -t`
 * on a FIFO nobody writes, not with `sleep`: a fork and exec per line took a debian guest under TCG
 * about 120 ms of CPU, which made a line every 10 ms one every 120. Debian's `sh` (dash) has no
 * `read -t`, its bash has; the minimal image's `sh` is busybox's, which has.
 */
const printer = (image: 'minimal' | 'debian', ms: number, stop = '/run/svc-never') => ({
  cmd: image === 'debian' ? 'bash' : 'sh',
  args: [
    '-c',
    `f=/tmp/svc-printer-$$; mkfifo $f; exec 3<>$f; rm -f $f; i=0; while [ ! -e ${stop} ]; do i=$((i+1)); echo "n $i"; read -t ${ms / 1000} x <&3 || :; done`,
  ],
});

/** Each line `n 1` .. `n N` once, in order, and at least `least` of them. */
const expectPrinted = (out: string, least: number, end: Record<string, unknown>) => {
  const count = out.split('\n').filter(Boolean).length;
  expect(count, 'lines printed').to.be.at.least(least);
  expectNumbered(out, count, end);
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The first value `f` has within `ms` (a check that throws is a "not yet"). */
const until = <T>(what: string, ms: number, f: () => Promise<T | undefined>) => waitFor(what, f, { ms, every: 200 });

for (const image of ['minimal', 'debian'] as const) {
  describe(`durable processes and watches on real QEMU guests (${image})`, function () {
    this.timeout(900_000);
    let d: TestDaemon;
    const vm = `proc-${image}`;
    const P = `/vms/${vm}/processes`;
    const sh = (script: string, on = vm) => guestSh(d, on, script);
    const agentUp = (on = vm) =>
      until(`the agent of ${on} to answer`, 120_000, async () =>
        (await d.call('GET', `/vms/${on}/agent/health`)).status === 200 ? true : undefined,
      );
    const ended = (id: string, on = vm) =>
      until(`${id} to end`, 120_000, async () => {
        const j = (await d.call('GET', `/vms/${on}/processes/${id}`)).json;
        return j?.state === 'ended' ? j : undefined;
      });

    before(async () => {
      d = await startSeededDaemon(
        { kind: image, memory_mb: image === 'debian' ? 768 : 384 },
        {
          sandbox_metrics_enabled: false,
          ready_timeout: '240s',
          shutdown_timeout: '30s',
        },
      );
      const r = await d.call('POST', '/vms', { name: vm, persistent: true });
      expect(r.status, r.text).to.equal(201);
    });
    after(async () => {
      for (const n of [vm, `${vm}-clone`]) await d.call('DELETE', `/vms/${n}`).catch(() => undefined);
      await d.stop();
    });

    it('keeps every line exactly once across 20 reconnects, a daemon restart and an agent killed with -9; the pid stays', async () => {
      const stop = '/run/svc-stop-printer';
      await sh(`rm -f ${stop}`);
      const p = (await d.call('POST', P, { ...printer(image, 10, stop), tag: 'printer' })).json;
      expect(p.id).to.match(/^p\d+$/);
      const agentBefore = (await sh('cat /run/svc/agent.pid')).stdout.trim();
      const reading = readWithReconnects(d.unix, `${P}/${p.id}`, { reconnects: 20, maxMs: 500, timeoutMs: 400_000 });
      await sleep(2000);
      await d.restart();
      await agentUp();
      // The agent killed from inside: a kept process outlives it, as the printer must.
      // It waits for the test's word: a timed wait raced the agent's answer to this POST on a loaded host.
      await sh('rm -f /run/svc-kill-now');
      const killer = await d.call('POST', P, {
        cmd: 'sh',
        args: ['-c', 'while [ ! -e /run/svc-kill-now ]; do sleep 0.1; done; kill -9 $(cat /run/svc/agent.pid)'],
      });
      expect(killer.status, killer.text).to.equal(201);
      // the agent may die before this exec's answer is out: either way is fine
      await sh('touch /run/svc-kill-now').catch(() => undefined);
      await sleep(3000);
      await agentUp();
      // It ran on through the restart and the kill, and ends when told.
      expect((await d.call('GET', `${P}/printer`)).json.state).to.equal('running');
      await sh(`touch ${stop}`);
      const back = await reading;
      expectPrinted(back.text.stdout, 100, back.end);
      expect(back.end).to.include({ reason: 'exit', exit_code: 0 });
      expect((await d.call('GET', `${P}/printer`)).json.pid).to.equal(p.pid);
      expect((await sh('cat /run/svc/agent.pid')).stdout.trim(), 'a new agent').to.not.equal(agentBefore);
      // Its end was recorded by its keeper while no agent ran.
      expect(await ended(killer.json.id)).to.include({ reason: 'exit', exit_code: 0 });
    });

    it('keeps a process running and its output whole across suspend and restore', async () => {
      const stop = '/run/svc-stop-suspended';
      await sh(`rm -f ${stop}`);
      const p = (await d.call('POST', P, printer(image, 20, stop))).json;
      await sleep(1500);
      expect((await d.call('POST', `/vms/${vm}/suspend`)).status).to.equal(200);
      await restoreWarm(d, vm);
      expect((await d.call('GET', `${P}/${p.id}`)).json.state).to.equal('running');
      await sleep(500);
      await sh(`touch ${stop}`);
      const back = await readWithReconnects(d.unix, `${P}/${p.id}`, { reconnects: 3, maxMs: 1000, timeoutMs: 300_000 });
      expectPrinted(back.text.stdout, 20, back.end);
      expect(back.end.exit_code).to.equal(0);
    });

    it('tells the typed client where the reverted guest’s lines and file events begin after a revert to a snapshot: each once', async () => {
      const c = new SvcClient({ socket: d.config.socket, token: 'test-token', env: {} });
      const ac = new AbortController();
      await sh('rm -rf /root/rv; mkdir -p /root/rv');
      // A watch read the same way: what a reverted event moves it back past is no longer true.
      let events: { offset: number; e: string }[] = [];
      const revertedEvents: string[] = [];
      let begun = false;
      const offsetOf = (cursor: string) => Number(/^w\d+:(\d+)/.exec(cursor)![1]);
      const watching = (async () => {
        for await (const e of c.watch(vm, { path: '/root/rv' }, { signal: ac.signal, retryMs: 180_000 })) {
          if (e.type === 'reverted') {
            revertedEvents.push(e.cursor);
            events = events.filter((x) => x.offset <= offsetOf(e.cursor));
          } else if (e.type === 'watching') begun = true;
          else events.push({ offset: offsetOf(e.cursor), e: `${e.type} ${e.path}` });
        }
      })().then(
        () => undefined,
        (err: Error) => err,
      );
      const seen = (what: string) =>
        until(`the watch to see ${what}`, 180_000, async () => (events.some((x) => x.e === what) ? true : undefined));
      // said once its inotify watches are in place: a write before could go unseen
      await until('the watch to begin', 60_000, async () => (begun ? true : undefined));
      await sh('echo 1 > /root/rv/before');
      await seen('write /root/rv/before');
      const p = (await d.call('POST', P, printer(image, 50))).json;
      let out = Buffer.alloc(0);
      const told: { timeline: string; from: { stdout?: number; all?: number } }[] = [];
      const lines = () => out.toString().split('\n').length - 1;
      const reading = (async () => {
        for await (const f of c.processOutput(vm, p.id, { signal: ac.signal, retryMs: 180_000 })) {
          if ('stream' in f) {
            expect(f.offset, 'a frame where the last one ended').to.equal(out.length);
            out = Buffer.concat([out, f.encoding === 'base64' ? Buffer.from(f.data, 'base64') : Buffer.from(f.data)]);
          } else if ('reverted' in f) {
            told.push(f.reverted);
            out = out.subarray(0, f.reverted.from.stdout ?? f.reverted.from.all ?? 0);
          }
        }
      })().then(
        () => undefined,
        (err: Error) => err,
      );
      const linesAt = (n: number) => until(`${n} lines read`, 180_000, async () => (lines() >= n ? true : undefined));
      await linesAt(10);
      const atSnapshot = out.length;
      const taken = await d.call('POST', `/vms/${vm}/snapshots`, { name: 'lines' });
      expect(taken.status, taken.text).to.equal(201);
      await linesAt(lines() + 20);
      await sh('echo 2 > /root/rv/lost');
      await seen('write /root/rv/lost');
      const beforeRevert = out.length;
      const back = await d.call('POST', `/vms/${vm}/snapshots/lines/revert`);
      expect(back.status, back.text).to.equal(200);
      expect(back.json.warning, 'the revert cold-booted').to.equal(undefined);
      await until('the reader to be told of the revert', 180_000, async () => (told.length ? true : undefined));
      await linesAt(lines() + 20);
      await sh('echo 3 > /root/rv/after');
      await seen('write /root/rv/after');
      ac.abort();
      for (const failed of await Promise.all([reading, watching])) if (failed) throw failed;
      // The watch was told once, and holds what the reverted guest's files went through.
      expect(revertedEvents, 'the watch told once').to.have.length(1);
      expect(revertedEvents[0]).to.match(new RegExp(`@${told[0].timeline}$`));
      expect(events.map((x) => x.e)).to.deep.equal([
        'create /root/rv/before',
        'write /root/rv/before',
        'create /root/rv/after',
        'write /root/rv/after',
      ]);
      expect(told, 'told once').to.have.length(1);
      expect(told[0].from.stdout, 'the bytes the snapshot noted').to.be.within(atSnapshot, beforeRevert - 1);
      // What the reader holds is the reverted guest's output: n 1, n 2, ... each once, in order.
      const got = out.toString().split('\n');
      got.pop(); // a line not ended yet
      got.forEach((l, i) => expect(l, `line ${i + 1}`).to.equal(`n ${i + 1}`));
      await d.call('DELETE', `${P}/${p.id}`);
      for (const w of await c.watches(vm)) await c.removeWatch(vm, w.id);
      await d.call('DELETE', `/vms/${vm}/snapshots/lines`);
    });

    it('continues a process in a clone of a suspended template, which says where it was started', async () => {
      const p = (await d.call('POST', P, { ...printer(image, 50), tag: 'counter' })).json;
      await until('some lines', 60_000, async () =>
        (await d.call('GET', `${P}/${p.id}`)).json.bytes.stdout > 30 ? true : undefined,
      );
      expect((await d.call('POST', `/vms/${vm}/suspend`)).status).to.equal(200);
      const c = await d.call('POST', `/vms/${vm}/clone`, { name: `${vm}-clone` });
      expect(c.status, c.text).to.equal(201);
      const CP = `/vms/${vm}-clone/processes`;
      const inClone = (await d.call('GET', `${CP}/counter`)).json;
      expect(inClone).to.include({ id: p.id, pid: p.pid, state: 'running', started_in: vm });
      const before = inClone.bytes.stdout as number;
      const grown = await until('the clone’s copy to print on', 60_000, async () => {
        const j = (await d.call('GET', `${CP}/${p.id}`)).json;
        return j.bytes.stdout > before + 30 ? j : undefined;
      });
      expect(grown.state).to.equal('running');
      const lines = ndjson((await d.call('GET', `${CP}/${p.id}/output`)).text)
        .filter((l) => l.stream === 'stdout')
        .map((l) => l.data)
        .join('')
        .split('\n')
        .filter(Boolean);
      lines.forEach((l, i) => expect(l).to.equal(`n ${i + 1}`));
      expect((await d.call('DELETE', `/vms/${vm}-clone`)).status).to.equal(200);
      await restoreWarm(d, vm);
      expect((await d.call('POST', `${P}/counter/signal`, { signal: 'KILL' })).status).to.equal(204);
      expect((await ended(p.id)).signal).to.equal('SIGKILL');
      expect((await d.call('GET', `${P}/${p.id}`)).json.started_in).to.equal(undefined);
    });

    it('takes input and a terminal: stty size follows a resize, and a pipe ends on eof', async () => {
      const tty = (
        await d.call('POST', P, {
          cmd: 'sh',
          args: ['-c', 'stty size; read x; echo "got $x"; read y; stty size'],
          pty: { cols: 100, rows: 30 },
          stdin: true,
        })
      ).json;
      const f = followNdjson(d.unix, `${P}/${tty.id}/output?follow=1`);
      await f.until((l) => String(l.data ?? '').includes('30 100'), 60_000);
      await d.call('POST', `${P}/${tty.id}/stdin`, Buffer.from('hello\n'), {
        'content-type': 'application/octet-stream',
      });
      await f.until((l) => String(l.data ?? '').includes('got hello'), 60_000);
      expect((await d.call('POST', `${P}/${tty.id}/resize`, { cols: 120, rows: 40 })).status).to.equal(204);
      await d.call('POST', `${P}/${tty.id}/stdin`, Buffer.from('x\n'), { 'content-type': 'application/octet-stream' });
      await f.until((l) => 'reason' in l, 60_000);
      f.close();
      expect(
        f.lines
          .filter((l) => l.stream === 'pty')
          .map((l) => l.data)
          .join(''),
      ).to.match(/40 120/);
      const cat = (await d.call('POST', P, { cmd: 'cat', stdin: true })).json;
      await d.call('POST', `${P}/${cat.id}/stdin?eof=1`, Buffer.from('to cat\n'), {
        'content-type': 'application/octet-stream',
      });
      expect(await ended(cat.id)).to.include({ reason: 'exit', exit_code: 0 });
      expect(ndjson((await d.call('GET', `${P}/${cat.id}/output`)).text)[0]).to.deep.include({ data: 'to cat\n' });
    });

    it('keeps the newest 16 MiB of a stream and says what it dropped', async () => {
      const big = (
        await d.call('POST', P, {
          cmd: 'sh',
          args: ['-c', "head -c 20000000 /dev/zero | tr '\\0' a; echo; echo tail-end"],
        })
      ).json;
      await ended(big.id);
      const lines = ndjson((await d.call('GET', `${P}/${big.id}/output?from=0`)).text);
      const marker = lines[0] as { truncated: { stream: string; before: number } };
      expect(marker.truncated.stream).to.equal('stdout');
      const frames = lines.filter((l) => l.stream === 'stdout');
      expect(frames[0].offset).to.equal(marker.truncated.before);
      const kept = frames.reduce((n, l) => n + Buffer.byteLength(String(l.data)), 0);
      expect(marker.truncated.before + kept).to.equal(20_000_010);
      expect(kept).to.be.at.most(16 * 1024 * 1024);
      expect(String(frames.at(-1)!.data)).to.match(/tail-end\n$/);
      // Its last line by itself (tail): the 20 MB line before it is not sent
      const last = ndjson((await d.call('GET', `${P}/${big.id}/output?tail=1`)).text);
      expect(last).to.have.length(3);
      expect(last[0]).to.deep.equal({ start: { stdout: 20_000_001, stderr: 0 } });
      expect(last[1]).to.deep.equal({ stream: 'stdout', offset: 20_000_001, data: 'tail-end\n' });
      expect(last[2]).to.include({ reason: 'exit', exit_code: 0 });
    });

    it('reports exit codes and signals, and runs as another user', async () => {
      const seven = (await d.call('POST', P, { cmd: 'sh', args: ['-c', 'exit 7'] })).json;
      const sleeper = (await d.call('POST', P, { cmd: 'sleep', args: ['300'] })).json;
      expect((await d.call('POST', `${P}/${sleeper.id}/signal`, { signal: 'TERM' })).status).to.equal(204);
      expect(await ended(seven.id)).to.include({ reason: 'exit', exit_code: 7 });
      expect(await ended(sleeper.id)).to.include({ reason: 'signal', signal: 'SIGTERM', exit_code: 143 });
      const user = image === 'debian' ? 'svc' : 'nobody';
      const who = (await d.call('POST', P, { cmd: 'sh', args: ['-c', 'id -un; echo $HOME'], user })).json;
      await ended(who.id);
      const out = ndjson((await d.call('GET', `${P}/${who.id}/output`)).text)
        .filter((l) => l.stream === 'stdout')
        .map((l) => l.data)
        .join('');
      expect(out.split('\n')[0]).to.equal(user);
    });

    it('starts a process again by its restart policy, as its user each run, its output in one journal', async () => {
      const user = image === 'debian' ? 'svc' : 'nobody';
      const p = await d.call('POST', P, {
        cmd: 'sh',
        args: ['-c', 'echo "$(id -un) $$"; exit 5'],
        user,
        restart: 'on-failure',
        max_restarts: 2,
      });
      expect(p.status, p.text).to.equal(201);
      expect(await ended(p.json.id)).to.include({ reason: 'exit', exit_code: 5, restarts: 2, restart: 'on-failure' });
      const runs = ndjson((await d.call('GET', `${P}/${p.json.id}/output`)).text)
        .filter((l) => l.stream === 'stdout')
        .map((l) => l.data)
        .join('')
        .trim()
        .split('\n');
      expect(runs).to.have.length(3);
      for (const r of runs) expect(r.split(' ')[0]).to.equal(user);
      expect(new Set(runs).size, 'a new pid each run').to.equal(3);
    });

    it('watches a tree and resumes from a cursor with nothing missing or repeated', async () => {
      await sh('rm -rf /root/w; mkdir -p /root/w');
      const f = followNdjson(d.unix, `/vms/${vm}/watch?path=/root/w&recursive=1`);
      const watching = await f.until((l) => l.type === 'watching', 60_000);
      await sh('echo one > /root/w/a');
      await f.until((l) => l.type === 'write', 60_000);
      f.close();
      const seen = f.lines.slice(1);
      await sh('mv /root/w/a /root/w/b; mkdir /root/w/sub; sleep 0.5; echo two > /root/w/sub/c; rm /root/w/b');
      const g = followNdjson(d.unix, `/vms/${vm}/watch?from=${encodeURIComponent(String(seen.at(-1)!.cursor))}`);
      await g.until((l) => l.type === 'remove' && l.path === '/root/w/b', 60_000);
      g.close();
      const all = [...seen, ...g.lines].map((l) => `${l.type} ${l.path}${l.to ? ` ${l.to}` : ''}`);
      expect(all).to.deep.equal([
        'create /root/w/a',
        'write /root/w/a',
        'rename /root/w/a /root/w/b',
        'create /root/w/sub',
        'create /root/w/sub/c',
        'write /root/w/sub/c',
        'remove /root/w/b',
      ]);
      expect((await d.call('DELETE', `/vms/${vm}/watches/${watching.watch}`)).status).to.equal(200);
    });

    if (image === 'minimal') {
      it('lists 200 processes, started 8 at a time, each with an id of its own', async () => {
        const ids: string[] = [];
        for (let i = 0; i < 200; i += 8) {
          const starts = await Promise.all(
            Array.from({ length: Math.min(8, 200 - i) }, (_, k) =>
              d.call('POST', P, { cmd: 'true', tag: `t${i + k}` }),
            ),
          );
          for (const r of starts) expect(r.status, r.text).to.equal(201);
          ids.push(...starts.map((r) => (r.json as { id: string }).id));
        }
        expect(new Set(ids).size, 'no id given twice').to.equal(200);
        const listed = (await d.call('GET', P)).json as { id: string; tag?: string }[];
        const tags = new Map(listed.map((p) => [p.tag, p.id]));
        for (let i = 0; i < 200; i++) expect(tags.get(`t${i}`), `t${i}`).to.equal(ids[i]);
      });

      it('ends its processes with the boot they ran in, and says so', async () => {
        // The shutdown asks every process with SIGTERM, keepers too: a keeper records how its
        // process took it; one that ignored it is killed with its keeper, and reads as ended by the reboot.
        const s = (await d.call('POST', P, { cmd: 'sleep', args: ['3000'], tag: 'long' })).json;
        const deaf = (
          await d.call('POST', P, {
            cmd: 'sh',
            args: ['-c', 'trap "" TERM; while :; do sleep 1; done'],
            restart: 'always',
          })
        ).json;
        expect((await d.call('POST', `/vms/${vm}/shutdown`)).status).to.equal(200);
        expect((await d.call('POST', `/vms/${vm}/start`)).status).to.equal(200);
        expect((await d.call('GET', `${P}/${s.id}`)).json).to.include({
          state: 'ended',
          reason: 'signal',
          signal: 'SIGTERM',
        });
        expect((await d.call('GET', `${P}/${deaf.id}`)).json).to.include({
          state: 'ended',
          reason: 'reboot',
          restarts: 0,
        });
      });
    }
  });
}
