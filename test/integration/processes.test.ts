import { expect } from 'chai';
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect, createServer, type AddressInfo } from 'node:net';
import { SvcClient } from '../../src/adapters/client/svc-client.js';
import type { OutputFrame } from '../../src/domain/processes.js';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { followNdjson, ndjson } from '../helpers/http.js';
import { agentPid, expectNumbered, readWithReconnects } from '../helpers/processes.js';
import { waitFor as waitForValue } from '../helpers/wait.js';

/** A printer of `n 1`..`n COUNT`, one line every `ms` ms. */
const numbered = (count: number, ms: number) => ({
  cmd: 'sh',
  args: ['-c', `i=0; while [ $i -lt ${count} ]; do i=$((i+1)); echo "n $i"; sleep ${ms / 1000}; done`],
});

const waitFor = <T>(what: string, ms: number, f: () => Promise<T | undefined> | T | undefined) =>
  waitForValue(what, f, { ms });

/** `n 1\n` .. `n N\n`, as numbered() prints them. */
const expectedUpTo = (n: number) => Array.from({ length: n }, (_, i) => `n ${i + 1}\n`).join('');

/** A client of `d` through a proxy that cuts every connection after 50-250 ms. */
async function cuttingClient(d: TestDaemon): Promise<{ c: SvcClient; cuts: { n: number }; close: () => void }> {
  const cuts = { n: 0 };
  const proxy = createServer((inbound) => {
    const out = connect(d.tcp.port!, '127.0.0.1');
    inbound.pipe(out).pipe(inbound);
    const cut = setTimeout(
      () => {
        cuts.n++;
        inbound.destroy();
        out.destroy();
      },
      50 + Math.random() * 200,
    );
    const done = () => clearTimeout(cut);
    inbound.on('close', done).on('error', done);
    out.on('error', () => inbound.destroy());
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', () => r()));
  const c = new SvcClient({ api: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, token: 'test-token' });
  return { c, cuts, close: () => proxy.close() };
}

describe('durable processes and watches through the daemon (real local agents)', function () {
  this.timeout(120_000);
  let d: TestDaemon;
  const P = '/vms/pv/processes';
  before(async () => {
    d = await startTestDaemon({ fake_agent: true });
    expect((await d.call('POST', '/vms', { name: 'pv' })).status).to.equal(201);
  });
  after(() => d.stop());

  it('keeps a process running past its caller: every line exactly once across 20 random reconnects', async () => {
    const made = await d.call('POST', P, { ...numbered(300, 10), tag: 'printer' });
    expect(made.status, made.text).to.equal(201);
    expect(made.json).to.include({ tag: 'printer', state: 'running' });
    expect(made.json.id).to.match(/^p\d+$/);
    const back = await readWithReconnects(d.unix, `${P}/${made.json.id}`, { reconnects: 20, maxMs: 200 });
    expect(back.reconnects).to.equal(20);
    expectNumbered(back.text.stdout, 300, back.end);
    expect(back.end).to.include({ reason: 'exit', exit_code: 0 });
    // By tag too, and the listing says how it ended.
    const got = await d.call('GET', `${P}/printer`);
    expect(got.json).to.include({ id: made.json.id, state: 'ended', exit_code: 0, reason: 'exit' });
  });

  it('keeps it running and its output whole when the agent is killed and started again (the pid stays)', async () => {
    const made = await d.call('POST', P, numbered(150, 10));
    const before = agentPid(d, 'pv');
    expect(before).to.be.above(0);
    await new Promise((r) => setTimeout(r, 300));
    process.kill(before, 'SIGKILL');
    await waitFor('a new agent', 10_000, () => {
      const now = agentPid(d, 'pv');
      return now && now !== before ? now : undefined;
    });
    await waitFor('the agent answering', 10_000, async () =>
      (await d.call('GET', P)).status === 200 ? true : undefined,
    );
    const info = (await d.call('GET', `${P}/${made.json.id}`)).json;
    expect(info.pid).to.equal(made.json.pid);
    const back = await readWithReconnects(d.unix, `${P}/${made.json.id}`, { reconnects: 3, maxMs: 300 });
    expectNumbered(back.text.stdout, 150, back.end);
    expect(back.end.exit_code).to.equal(0);
  });

  it('the typed client reads on by itself across connections cut under it: each byte once', async () => {
    const { c, cuts, close } = await cuttingClient(d);
    try {
      const made = await d.call('POST', P, numbered(200, 10));
      let outText = '';
      let end: OutputFrame | undefined;
      for await (const f of c.processOutput('pv', made.json.id, { retryMs: 10_000 })) {
        if ('stream' in f) outText += f.data;
        else if ('reason' in f) end = f;
      }
      expectNumbered(outText, 200);
      expect(end).to.include({ reason: 'exit', exit_code: 0 });
      expect(cuts.n, 'connections cut').to.be.above(3);
    } finally {
      close();
    }
  });

  it('reads the last lines of each stream (tail), then what comes next, each byte once across cut connections', async () => {
    const both = await d.call('POST', P, {
      cmd: 'sh',
      args: ['-c', 'i=0; while [ $i -lt 1000 ]; do i=$((i+1)); echo "out $i"; echo "err $i" >&2; done'],
    });
    await waitFor('the writer to end', 30_000, async () =>
      (await d.call('GET', `${P}/${both.json.id}`)).json.state === 'ended' ? true : undefined,
    );
    const lines = ndjson((await d.call('GET', `${P}/${both.json.id}/output?tail=3`)).text);
    const text = (s: string) =>
      lines
        .filter((l) => l.stream === s)
        .map((l) => l.data)
        .join('');
    expect(text('stdout')).to.equal('out 998\nout 999\nout 1000\n');
    expect(text('stderr')).to.equal('err 998\nerr 999\nerr 1000\n');
    const all = (s: string, n: number) => Array.from({ length: n }, (_, i) => `${s} ${i + 1}\n`).join('');
    expect(lines[0]).to.deep.equal({
      start: { stdout: Buffer.byteLength(all('out', 997)), stderr: Buffer.byteLength(all('err', 997)) },
    });
    expect(lines.at(-1)).to.include({ reason: 'exit', exit_code: 0 });
    // tail=0: nothing printed before, only the end
    const none = ndjson((await d.call('GET', `${P}/${both.json.id}/output?tail=0`)).text);
    expect(none.map((l) => Object.keys(l)[0])).to.deep.equal(['start', 'reason']);

    // A running printer read from its last 5 lines by the typed client, its connections cut under it:
    // each line once and in order from there to the end (a reconnect that asked for a tail again
    // would repeat lines).
    const { c, cuts, close } = await cuttingClient(d);
    try {
      const made = await d.call('POST', P, numbered(200, 10));
      await waitFor('50 lines', 20_000, async () =>
        ((await d.call('GET', `${P}/${made.json.id}`)).json.bytes.stdout ?? 0) > 50 * 6 ? true : undefined,
      );
      let outText = '';
      let start: OutputFrame | undefined;
      for await (const f of c.processOutput('pv', made.json.id, { tail: 5, retryMs: 10_000 })) {
        if ('start' in f) start = f;
        else if ('stream' in f) outText += f.data;
      }
      const got = outText.trimEnd().split('\n');
      const first = Number(got[0].slice(2));
      expect(first, outText.slice(0, 40)).to.be.above(40);
      expect(got).to.deep.equal(Array.from({ length: 201 - first }, (_, i) => `n ${first + i}`));
      expect(start).to.deep.equal({ start: { stdout: Buffer.byteLength(expectedUpTo(first - 1)), stderr: 0 } });
      expect(cuts.n, 'connections cut').to.be.above(3);
    } finally {
      close();
    }
    const bad = await d.call('GET', `${P}/${both.json.id}/output?tail=2&from=0`);
    expect(bad.status).to.equal(400);
    expect(bad.json.error).to.match(/not both/);
  });

  it('takes input and a terminal: stty size follows a resize, stdin ends on eof', async () => {
    const tty = await d.call('POST', P, {
      cmd: 'sh',
      args: ['-c', 'stty size; read x; echo "got $x"; read y; stty size'],
      pty: { cols: 100, rows: 30 },
      stdin: true,
    });
    expect(tty.status, tty.text).to.equal(201);
    const id = tty.json.id as string;
    const f = followNdjson(d.unix, `${P}/${id}/output?follow=1`);
    await f.until((l) => String(l.data ?? '').includes('30 100'), 10_000);
    expect(
      (await d.call('POST', `${P}/${id}/stdin`, Buffer.from('hello\n'), { 'content-type': 'application/octet-stream' }))
        .status,
    ).to.equal(204);
    await f.until((l) => String(l.data ?? '').includes('got hello'), 10_000);
    expect((await d.call('POST', `${P}/${id}/resize`, { cols: 120, rows: 40 })).status).to.equal(204);
    await d.call('POST', `${P}/${id}/stdin`, Buffer.from('x\n'), { 'content-type': 'application/octet-stream' });
    await f.until((l) => 'reason' in l, 10_000);
    f.close();
    const all = f.lines
      .filter((l) => l.stream === 'pty')
      .map((l) => l.data)
      .join('');
    expect(all).to.match(/40 120/);
    // A pipe's input ends when asked: cat sees its end of file and exits.
    const cat = await d.call('POST', P, { cmd: 'cat', stdin: true });
    const r = await d.call('POST', `${P}/${cat.json.id}/stdin?eof=1`, Buffer.from('to cat\n'), {
      'content-type': 'application/octet-stream',
    });
    expect(r.status, r.text).to.equal(204);
    const out = await waitFor('cat to end', 10_000, async () => {
      const lines = ndjson((await d.call('GET', `${P}/${cat.json.id}/output`)).text);
      return lines.some((l) => 'reason' in l) ? lines : undefined;
    });
    expect(out[0]).to.deep.include({ stream: 'stdout', offset: 0, data: 'to cat\n' });
    expect(out.at(-1)).to.include({ reason: 'exit', exit_code: 0 });
  });

  it('says what it no longer keeps: a truncation marker, then the newest bytes', async () => {
    const big = await d.call('POST', P, {
      cmd: 'sh',
      args: ['-c', "head -c 20000000 /dev/zero | tr '\\0' a; echo; echo tail-end"],
    });
    await waitFor('the writer to end', 30_000, async () =>
      (await d.call('GET', `${P}/${big.json.id}`)).json.state === 'ended' ? true : undefined,
    );
    const lines = ndjson((await d.call('GET', `${P}/${big.json.id}/output?from=0`)).text);
    const marker = lines[0] as { truncated: { stream: string; before: number } };
    expect(marker.truncated.stream).to.equal('stdout');
    expect(marker.truncated.before).to.be.above(20_000_010 - 16 * 1024 * 1024 - 1);
    const frames = lines.filter((l) => l.stream === 'stdout');
    expect(frames[0].offset).to.equal(marker.truncated.before);
    expect(String(frames.at(-1)!.data)).to.match(/tail-end\n$/);
    const kept = frames.reduce((n, l) => n + Buffer.byteLength(String(l.data)), 0);
    expect(marker.truncated.before + kept).to.equal(20_000_000 + 1 + 9);
    expect(kept).to.be.at.most(16 * 1024 * 1024);
  });

  it('tells a reader that comes back after a revert where the reverted guest’s bytes begin (its timeline)', async () => {
    const made = await d.call('POST', P, numbered(100_000, 10));
    expect(made.status, made.text).to.equal(201);
    const id = String(made.json.id);
    const bytesAt = (least: number) =>
      waitFor(`${least} bytes of output`, 20_000, async () => {
        const j = (await d.call('GET', `${P}/${id}`)).json;
        return j.bytes.stdout >= least ? j : undefined;
      });
    const early = await bytesAt(40);
    expect(early.timeline, 'a VM never reverted').to.equal('t0');
    const taken = await d.call('POST', '/vms/pv/snapshots', { name: 'lines' });
    expect(taken.status, taken.text).to.equal(201);
    expect(taken.json, 'the noted bytes are the daemon’s').to.not.have.any.keys('kept_output', 'timeline');
    const late = await bytesAt(early.bytes.stdout + 300);
    const back = await d.call('POST', '/vms/pv/snapshots/lines/revert');
    expect(back.status, back.text).to.equal(200);
    const now = String((await d.call('GET', `${P}/${id}`)).json.timeline);
    expect(now).to.match(/^t[0-9a-f]{12}$/);
    // A reader of the first timeline, past what the snapshot noted: told, and read from there.
    const old = await d.call('GET', `${P}/${id}/output?from=stdout:${late.bytes.stdout}&timeline=t0`);
    expect(old.status, old.text).to.equal(200);
    expect(old.headers['x-svc-timeline']).to.equal(now);
    const [told, first] = ndjson(old.text) as [{ reverted: { timeline: string; from: { stdout: number } } }, never];
    expect(told.reverted.timeline).to.equal(now);
    const at = told.reverted.from.stdout;
    expect(at, 'what the snapshot noted').to.be.within(early.bytes.stdout, late.bytes.stdout - 1);
    expect(first).to.include({ stream: 'stdout', offset: at });
    // From the timeline now, or below what was shared: read on, nothing said.
    for (const q of [`from=stdout:${at}&timeline=${now}`, `from=stdout:${early.bytes.stdout}&timeline=t0`]) {
      const [f] = ndjson((await d.call('GET', `${P}/${id}/output?${q}`)).text);
      expect(f, q).to.have.property('stream', 'stdout');
    }
    // A timeline it never was on shares nothing: from 0.
    const [fromZero] = ndjson((await d.call('GET', `${P}/${id}/output?from=9&timeline=t1234`)).text);
    expect(fromZero).to.deep.equal({ reverted: { timeline: now, from: { all: 0 } } });
    const bad = await d.call('GET', `${P}/${id}/output?from=9&timeline=../x`);
    expect(bad.status, bad.text).to.equal(400);
    expect(bad.json.error).to.match(/timeline must be/);
    await d.call('DELETE', `${P}/${id}`);
    await d.call('DELETE', '/vms/pv/snapshots/lines');
  });

  it('moves a reader back to the bytes noted at a suspend, after a revert to a snapshot of the suspended VM', async () => {
    expect((await d.call('POST', '/vms', { name: 'sv', persistent: true })).status).to.equal(201);
    const S = '/vms/sv/processes';
    const id = String((await d.call('POST', S, numbered(100_000, 10))).json.id);
    const early = await waitFor('40 bytes of output', 20_000, async () => {
      const j = (await d.call('GET', `${S}/${id}`)).json;
      return j?.bytes?.stdout >= 40 ? j : undefined;
    });
    // The fake's suspend ends its stand-in processes (the guest is this host): the bytes stop there.
    expect((await d.call('POST', '/vms/sv/suspend')).status).to.equal(200);
    const taken = await d.call('POST', '/vms/sv/snapshots', { name: 'held' });
    expect(taken.status, taken.text).to.equal(201);
    expect(taken.json).to.include({ taken_from: 'suspended', memory: true });
    expect((await d.call('GET', '/vms/sv')).json, 'the noted bytes are the daemon’s').to.not.have.property(
      'saved_output',
    );
    expect((await d.call('POST', '/vms/sv/restore')).status).to.equal(200);
    const end = Number((await d.call('GET', `${S}/${id}`)).json.bytes.stdout);
    expect((await d.call('POST', '/vms/sv/snapshots/held/revert')).status).to.equal(200);
    const [first] = ndjson((await d.call('GET', `${S}/${id}/output?from=stdout:${end}&timeline=t0`)).text) as [
      { reverted?: { from: { stdout: number } } },
    ];
    // Noted at the suspend: the reader stays (all it read was noted) or goes back no further than
    // what was there before it; without the note it would go back to 0.
    if (first.reverted)
      expect(first.reverted.from.stdout, 'the bytes noted at the suspend').to.be.within(early.bytes.stdout, end - 1);
    else expect(first, 'the end, read from where it ended').to.have.property('reason');
    expect((await d.call('DELETE', '/vms/sv')).status).to.equal(200);
  });

  it('moves a reader back to the bytes noted at a pause, after a revert to a snapshot of the paused VM and of it suspended', async () => {
    expect((await d.call('POST', '/vms', { name: 'pz', persistent: true })).status).to.equal(201);
    const S = '/vms/pz/processes';
    const id = String((await d.call('POST', S, numbered(100_000, 10))).json.id);
    const bytes = async () => Number((await d.call('GET', `${S}/${id}`)).json.bytes.stdout);
    const early = await waitFor('40 bytes of output', 20_000, async () => {
      const b = await bytes();
      return b >= 40 ? b : undefined;
    });
    // A paused guest cannot be asked: its processes' bytes are noted as it pauses. (The fake's
    // pause holds nothing, its stand-in process writes on: the noted bytes are a lower bound.)
    expect((await d.call('POST', '/vms/pz/pause')).status).to.equal(200);
    const paused = await d.call('POST', '/vms/pz/snapshots', { name: 'held' });
    expect(paused.json).to.include({ taken_from: 'paused', memory: true });
    // Suspended while paused: the suspend takes what the pause noted.
    expect((await d.call('POST', '/vms/pz/suspend')).status).to.equal(200);
    expect((await d.call('POST', '/vms/pz/snapshots', { name: 'saved' })).json).to.include({
      taken_from: 'suspended',
    });
    expect((await d.call('POST', '/vms/pz/restore')).status).to.equal(200);
    // Both snapshots were taken on t0 and noted what the pause did: a reader of t0 from the last
    // bytes it saw is moved back to them (without the note, to 0).
    for (const snap of ['held', 'saved']) {
      const end = await bytes();
      expect(end, 'its output went on past the pause').to.be.above(early);
      const back = await d.call('POST', `/vms/pz/snapshots/${snap}/revert`);
      expect(back.status, back.text).to.equal(200);
      const [first] = ndjson((await d.call('GET', `${S}/${id}/output?from=stdout:${end}&timeline=t0`)).text) as [
        { reverted?: { from: { stdout?: number; all?: number } } },
      ];
      expect(first.reverted?.from, `${snap}: told where the reverted bytes begin`).to.have.property('stdout');
      expect(first.reverted!.from.stdout, snap).to.be.within(early, end - 1);
    }
    expect((await d.call('DELETE', '/vms/pz')).status).to.equal(200);
  });

  it('reports exit codes and signals', async () => {
    const seven = await d.call('POST', P, { cmd: 'sh', args: ['-c', 'exit 7'] });
    const sleeper = await d.call('POST', P, { cmd: 'sleep', args: ['100'], tag: 'sleeper' });
    // A tag names one running process at a time.
    expect((await d.call('POST', P, { cmd: 'sleep', args: ['1'], tag: 'sleeper' })).status).to.equal(409);
    // InvalidState is a 400 in this API (docs/api.md, "Errors").
    expect((await d.call('POST', `${P}/sleeper/signal`, { signal: 'TERM' })).status).to.equal(204);
    const ended = (id: string) =>
      waitFor(`${id} to end`, 10_000, async () => {
        const j = (await d.call('GET', `${P}/${id}`)).json;
        return j.state === 'ended' ? j : undefined;
      });
    expect(await ended(seven.json.id)).to.include({ reason: 'exit', exit_code: 7 });
    expect(await ended(sleeper.json.id)).to.include({ reason: 'signal', signal: 'SIGTERM', exit_code: 143 });
    expect((await d.call('POST', `${P}/sleeper/signal`, { signal: 'TERM' })).status).to.equal(400);
    const end = ndjson((await d.call('GET', `${P}/${sleeper.json.id}/output`)).text).at(-1);
    expect(end).to.include({ reason: 'signal', signal: 'SIGTERM' });
  });

  it('lists 200 processes, and forgets one on DELETE (killing it when it runs)', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 200; i++) {
      const r = await d.call('POST', P, { cmd: 'true' });
      expect(r.status, r.text).to.equal(201);
      ids.push(r.json.id);
    }
    const listed = (await d.call('GET', P)).json as { id: string }[];
    for (const id of ids)
      expect(
        listed.some((p) => p.id === id),
        id,
      ).to.equal(true);
    // Ids only grow.
    const nums = ids.map((id) => Number(id.slice(1)));
    expect(nums).to.deep.equal([...nums].sort((a, b) => a - b));
    const long = await d.call('POST', P, { cmd: 'sleep', args: ['100'] });
    const del = await d.call('DELETE', `${P}/${long.json.id}`);
    expect(del.status, del.text).to.equal(200);
    expect((await d.call('GET', `${P}/${long.json.id}`)).status).to.equal(404);
    expect(() => process.kill(long.json.pid, 0)).to.throw();
    const again = await d.call('POST', P, { cmd: 'true' });
    expect(Number(again.json.id.slice(1))).to.be.above(Number(long.json.id.slice(1)));
  });

  it('refuses what it cannot do with the right status, before the guest', async () => {
    const bad = async (method: string, path: string, body: unknown, status: number, what: RegExp) => {
      const r = await d.call(method, path, body);
      expect(r.status, `${method} ${path}: ${r.text}`).to.equal(status);
      expect(r.json.error).to.match(what);
    };
    await bad('POST', P, { args: ['x'] }, 400, /cmd must be a string/);
    await bad('POST', P, { cmd: 'x', pty: { cols: 0 } }, 400, /pty.cols/);
    await bad('POST', P, { cmd: 'x', extra: 1 }, 400, /unknown field extra/);
    await bad('POST', P, { cmd: 'x', tag: 'p12' }, 400, /tag/);
    await bad('POST', P, { cmd: 'no-such-command-here' }, 400, /cannot start no-such-command-here/);
    await bad('POST', P, { cmd: 'true', cwd: '/no/such/dir' }, 400, /not a directory/);
    await bad('POST', P, { cmd: 'true', user: 'no-such-user-here' }, 400, /no user/);
    await bad('GET', `${P}/p999999`, undefined, 404, /no process p999999/);
    await bad('GET', `${P}/bad%20id`, undefined, 400, /not a process id or tag/);
    await bad('GET', `${P}/p1/output?from=stdout:x`, undefined, 400, /from must be/);
    await bad('GET', `${P}/p1/output?from=999999999`, undefined, 400, /past the end/);
    await bad('POST', `${P}/p1/signal`, { signal: 'SIGNOPE' }, 400, /signal must be one of/);
    await bad('POST', `${P}/p1/stdin`, Buffer.from('x'), 400, /without stdin/);
    await bad('GET', '/vms/nope/processes', undefined, 404, /vm nope not found/);
    await bad('GET', '/vms/pv/watch', undefined, 400, /path .* or from .* is required/);
    await bad('GET', '/vms/pv/watch?from=x', undefined, 400, /cursor/);
    await bad('GET', '/vms/pv/watch?path=/no/such/path/here', undefined, 404, /no such file/);
    await bad('DELETE', '/vms/pv/watches/w999', undefined, 404, /no watch w999/);
  });

  it('watches a tree: create, write, rename, remove in order, and resumes from a cursor with nothing missing or repeated', async () => {
    const dir = tempDir('svc-watch-');
    const f = followNdjson(d.unix, `/vms/pv/watch?path=${encodeURIComponent(dir)}&recursive=1`);
    const watching = await f.until((l) => l.type === 'watching', 10_000);
    expect(watching.cursor).to.match(/^w\d+:0(@t[0-9a-f]+)?$/); // the VM's timeline after a revert
    writeFileSync(join(dir, 'a'), 'one');
    await f.until((l) => l.type === 'write', 10_000);
    f.close();
    const seen = f.lines.slice(1);
    const last = String(seen.at(-1)!.cursor);
    // While nobody listens:
    renameSync(join(dir, 'a'), join(dir, 'b'));
    mkdirSync(join(dir, 'sub'));
    writeFileSync(join(dir, 'sub', 'c'), 'two');
    rmSync(join(dir, 'b'));
    const g = followNdjson(d.unix, `/vms/pv/watch?from=${encodeURIComponent(last)}`);
    await g.until((l) => l.type === 'remove' && l.path === join(dir, 'b'), 10_000);
    g.close();
    const all = [...seen, ...g.lines]
      .map((l) => `${l.type} ${String(l.path).slice(dir.length)}${l.to ? ` ${String(l.to).slice(dir.length)}` : ''}`)
      // c may be written before sub's own watch is in place: then its creation is all there is to see
      .filter((e) => e !== 'write /sub/c');
    expect(all).to.deep.equal(['create /a', 'write /a', 'rename /a /b', 'create /sub', 'create /sub/c', 'remove /b']);
    const cursors = [...seen, ...g.lines].map((l) => Number(/^w\d+:(\d+)/.exec(String(l.cursor))![1]));
    expect(cursors).to.deep.equal([...cursors].sort((a, b) => a - b));
    expect(new Set(cursors).size).to.equal(cursors.length);
    const watchId = String(watching.watch);
    expect(((await d.call('GET', '/vms/pv/watches')).json as { id: string }[]).map((w) => w.id)).to.include(watchId);
    expect((await d.call('DELETE', `/vms/pv/watches/${watchId}`)).status).to.equal(200);
    expect(((await d.call('GET', '/vms/pv/watches')).json as { id: string }[]).map((w) => w.id)).not.to.include(
      watchId,
    );
  });

  it('the typed client’s watch comes back by itself after the agent is killed with -9: nothing missing or repeated', async () => {
    const dir = tempDir('svc-watch-kill-');
    const c = new SvcClient({ socket: d.unix.socketPath!, token: 'test-token', env: {} });
    const ac = new AbortController();
    const got: { type: string; path?: string; cursor: string }[] = [];
    const reading = (async () => {
      for await (const e of c.watch('pv', { path: dir }, { signal: ac.signal, retryMs: 20_000 })) got.push(e);
    })().then(
      () => 'ended',
      (err: Error) => err,
    );
    const seen = (type: string, name: string) =>
      waitFor(`${type} ${name}`, 15_000, () =>
        got.some((e) => e.type === type && e.path === join(dir, name)) ? true : undefined,
      );
    await waitFor('the watch', 10_000, () => (got.length ? true : undefined));
    writeFileSync(join(dir, 'a'), 'one');
    await seen('write', 'a');
    const before = agentPid(d, 'pv');
    process.kill(before, 'SIGKILL');
    await waitFor('a new agent', 10_000, () => {
      const now = agentPid(d, 'pv');
      return now && now !== before ? now : undefined;
    });
    writeFileSync(join(dir, 'b'), 'two');
    // Until 2026-12-04 the daemon ended the answer cleanly when the agent's broke off, and the
    // client took that for the watch's end: it never saw b.
    await seen('write', 'b');
    ac.abort();
    expect(await reading).to.not.be.instanceOf(Error);
    expect(got.map((e) => `${e.type} ${e.path === undefined ? '' : e.path.slice(dir.length)}`)).to.deep.equal([
      'watching ',
      'create /a',
      'write /a',
      'create /b',
      'write /b',
    ]);
    await c.removeWatch('pv', String((got[0] as { watch?: string }).watch));
  });

  it('moves a watch’s cursor of the timeline a revert left back to what the snapshot noted, and says so', async () => {
    const dir = tempDir('svc-watch-revert-');
    const f = followNdjson(d.unix, `/vms/pv/watch?path=${encodeURIComponent(dir)}`);
    const watching = await f.until((l) => l.type === 'watching', 10_000);
    const w = String(watching.watch);
    writeFileSync(join(dir, 'a'), 'one');
    await f.until((l) => l.type === 'write', 10_000);
    f.close();
    const offsetOf = (c: unknown) => Number(/^w\d+:(\d+)/.exec(String(c))![1]);
    const listed = async () =>
      ((await d.call('GET', '/vms/pv/watches')).json as { id: string; cursor: string }[]).find((x) => x.id === w)!;
    const early = (await listed()).cursor;
    // the first timeline is not said; this VM was reverted by a test before
    const [, before] = /^w\d+:\d+(?:@(t[0-9a-f]+))?$/.exec(early)!;
    expect(offsetOf(early)).to.be.at.least(offsetOf(f.lines.at(-1)!.cursor));
    expect((await d.call('POST', '/vms/pv/snapshots', { name: 'events' })).status).to.equal(201);
    writeFileSync(join(dir, 'b'), 'two');
    const g = followNdjson(d.unix, `/vms/pv/watch?from=${encodeURIComponent(early)}`);
    await g.until((l) => l.type === 'write' && l.path === join(dir, 'b'), 10_000);
    g.close();
    const late = String(g.lines.at(-1)!.cursor);
    const back = await d.call('POST', '/vms/pv/snapshots/events/revert');
    expect(back.status, back.text).to.equal(200);
    const [, now] = /^w\d+:\d+@(t[0-9a-f]{12})$/.exec((await listed()).cursor)!;
    expect(now, 'the list says the timeline now').to.not.equal(before);
    // The reader of the first timeline, past what the snapshot noted: told, then the events from there.
    const h = followNdjson(d.unix, `/vms/pv/watch?from=${encodeURIComponent(late)}`);
    const b = await h.until((l) => l.type === 'write' && l.path === join(dir, 'b'), 10_000);
    h.close();
    const told = h.lines[0];
    expect(told.type).to.equal('reverted');
    const on = String(told.cursor).split('@')[1];
    expect(on).to.equal(now);
    expect(offsetOf(told.cursor), 'what the snapshot noted').to.be.within(offsetOf(early), offsetOf(late) - 1);
    expect(h.lines[1]).to.include({ type: 'create', path: join(dir, 'b') });
    expect(String(b.cursor)).to.match(new RegExp(`@${on}$`));
    // From a cursor on the timeline now: read on, nothing said. One of a timeline never seen: from 0.
    const i = followNdjson(d.unix, `/vms/pv/watch?from=${encodeURIComponent(String(told.cursor))}`);
    expect(await i.until(() => true, 10_000)).to.include({ type: 'create', path: join(dir, 'b') });
    i.close();
    const j = followNdjson(d.unix, `/vms/pv/watch?from=${w}:5@t1234`);
    expect(await j.until(() => true, 10_000)).to.deep.equal({ type: 'reverted', cursor: `${w}:0@${on}` });
    j.close();
    expect((await d.call('DELETE', `/vms/pv/watches/${w}`)).status).to.equal(200);
    await d.call('DELETE', '/vms/pv/snapshots/events');
  });

  it('kills what a VM kept when it is deleted (the stand-in guest is this host)', async () => {
    const made = await d.call('POST', P, { cmd: 'sleep', args: ['100'] });
    expect(() => process.kill(made.json.pid, 0)).not.to.throw();
    expect((await d.call('DELETE', '/vms/pv')).status).to.equal(200);
    await waitFor('the kept sleep to die', 5000, () => {
      try {
        process.kill(made.json.pid, 0);
        return undefined;
      } catch {
        return true;
      }
    });
  });
});

describe('durable processes with a restart policy (real local agents)', function () {
  this.timeout(120_000);
  let d: TestDaemon;
  const P = '/vms/rv/processes';
  before(async () => {
    d = await startTestDaemon({ fake_agent: true });
    expect((await d.call('POST', '/vms', { name: 'rv' })).status).to.equal(201);
  });
  after(() => d.stop());

  const ended = (id: string) =>
    waitFor(`${id} to end`, 20_000, async () => {
      const j = (await d.call('GET', `${P}/${id}`)).json;
      return j.state === 'ended' ? j : undefined;
    });
  const stdout = async (id: string) =>
    ndjson((await d.call('GET', `${P}/${id}/output`)).text)
      .filter((f) => f.stream === 'stdout')
      .map((f) => f.data as string)
      .join('');
  /** The svc-keep of a process of pv's, if one runs. */
  const keeperPid = (id: string) =>
    Number(
      readdirSync('/proc')
        .filter((x) => /^\d+$/.test(x))
        .find((p) => {
          try {
            const cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0');
            return (
              cmd[0].endsWith('svc-keep') && cmd[1].endsWith(join('rv', 'guest', 'var', 'lib', 'svc', 'processes', id))
            );
          } catch {
            return false;
          }
        }) ?? 0,
    );
  const keeper = (id: string) => keeperPid(id) > 0;

  it('on-failure starts it again N times, its output going on in one journal', async () => {
    const r = await d.call('POST', P, {
      cmd: 'sh',
      args: ['-c', 'echo "run $$"; echo oops >&2; exit 3'],
      restart: 'on-failure',
      max_restarts: 2,
    });
    expect(r.status, r.text).to.equal(201);
    expect(r.json).to.include({ restart: 'on-failure', max_restarts: 2, restarts: 0 });
    const end = await ended(r.json.id);
    expect(end).to.include({ reason: 'exit', exit_code: 3, restarts: 2 });
    const runs = (await stdout(r.json.id)).trim().split('\n');
    expect(runs).to.have.length(3);
    expect(new Set(runs).size, 'a new pid each run').to.equal(3);
    expect(end.bytes).to.deep.equal({ stdout: runs.join('\n').length + 1, stderr: 15 });
    // A clean exit ends it at once.
    const ok = await d.call('POST', P, { cmd: 'true', restart: 'on-failure' });
    expect(await ended(ok.json.id)).to.include({ reason: 'exit', exit_code: 0, restarts: 0 });
  });

  it('always starts it again, its pid the current run’s; a HUP does not stop it, a TERM does', async () => {
    const r = await d.call('POST', P, {
      cmd: 'sh',
      args: ['-c', 'echo "run $$"; exec sleep 100'],
      restart: 'always',
    });
    expect(r.status, r.text).to.equal(201);
    const first = r.json.pid as number;
    // Each run's line before its signal: one that came before the shell's echo would end the run
    // with nothing said (a clean-clone CI run saw the first run's line missing).
    await waitFor('the first run’s line', 10_000, async () =>
      (await stdout(r.json.id)) === `run ${first}\n` ? true : undefined,
    );
    expect((await d.call('POST', `${P}/${r.json.id}/signal`, { signal: 'HUP' })).status).to.equal(204);
    const again = await waitFor('the second run', 10_000, async () => {
      const j = (await d.call('GET', `${P}/${r.json.id}`)).json;
      return j.restarts === 1 && j.pid !== first ? j : undefined;
    });
    expect(again).to.include({ state: 'running', restart: 'always' });
    expect(() => process.kill(first, 0), 'the first run is gone').to.throw();
    expect(() => process.kill(again.pid, 0)).not.to.throw();
    await waitFor('the second run’s line', 10_000, async () =>
      (await stdout(r.json.id)) === `run ${first}\nrun ${again.pid}\n` ? true : undefined,
    );
    expect((await d.call('POST', `${P}/${r.json.id}/signal`, { signal: 'TERM' })).status).to.equal(204);
    expect(await ended(r.json.id)).to.include({ reason: 'signal', signal: 'SIGTERM', restarts: 1 });
    expect(await stdout(r.json.id)).to.equal(`run ${first}\nrun ${again.pid}\n`);
    await waitFor('its keeper to go', 5000, () => (keeper(r.json.id) ? undefined : true));
  });

  it('says why a run could not start, and DELETE ends one waiting between runs', async () => {
    // A script that removes itself: its second run cannot start (as a shell says, code 127).
    const script = join(tempDir('svc-restart-'), 'once.sh');
    writeFileSync(script, '#!/bin/sh\nrm -f -- "$0"\necho once\nexit 1\n', { mode: 0o755 });
    const gone = await d.call('POST', P, { cmd: script, restart: 'always', max_restarts: 1 });
    expect(gone.status, gone.text).to.equal(201);
    expect(await ended(gone.json.id)).to.include({ reason: 'exit', exit_code: 127, restarts: 1 });
    const errs = ndjson((await d.call('GET', `${P}/${gone.json.id}/output`)).text).filter((f) => f.stream === 'stderr');
    expect(errs.map((f) => f.data).join('')).to.match(/svc-keep: cannot start .*once\.sh: No such file/);
    // A crash loop backs off (100 ms, 200, 400...); DELETE in a wait ends it and its keeper.
    const loop = await d.call('POST', P, { cmd: 'false', restart: 'always' });
    await waitFor('two restarts', 10_000, async () =>
      (await d.call('GET', `${P}/${loop.json.id}`)).json.restarts >= 2 ? true : undefined,
    );
    expect(keeper(loop.json.id)).to.equal(true);
    expect((await d.call('DELETE', `${P}/${loop.json.id}`)).status).to.equal(200);
    await waitFor('its keeper to go', 5000, () => (keeper(loop.json.id) ? undefined : true));
    expect((await d.call('GET', `${P}/${loop.json.id}`)).status).to.equal(404);
    // And DELETE of one running: its run killed, no next one.
    const up = await d.call('POST', P, { cmd: 'sleep', args: ['100'], restart: 'always' });
    expect((await d.call('DELETE', `${P}/${up.json.id}`)).status).to.equal(200);
    expect(() => process.kill(up.json.pid, 0), 'its run is killed').to.throw();
    await waitFor('its keeper to go', 5000, () => (keeper(up.json.id) ? undefined : true));
  });

  it('starts no next run once its keeper is told TERM, as a guest that shuts down tells every process', async () => {
    const r = await d.call('POST', P, { cmd: 'sleep', args: ['100'], restart: 'always' });
    expect(r.status, r.text).to.equal(201);
    const k = keeperPid(r.json.id);
    expect(k).to.be.above(0);
    process.kill(k, 'SIGTERM');
    await new Promise((res) => setTimeout(res, 200));
    expect(keeper(r.json.id), 'the keeper lives on while its process runs').to.equal(true);
    process.kill(r.json.pid, 'SIGTERM');
    expect(await ended(r.json.id)).to.include({ reason: 'signal', signal: 'SIGTERM', restarts: 0 });
    await waitFor('its keeper to go', 5000, () => (keeper(r.json.id) ? undefined : true));
  });

  it('is refused where it cannot apply', async () => {
    const bad = async (body: unknown, what: RegExp) => {
      const r = await d.call('POST', P, body);
      expect(r.status, r.text).to.equal(400);
      expect(r.json.error).to.match(what);
    };
    await bad({ cmd: 'true', restart: 'sometimes' }, /restart must be/);
    await bad({ cmd: 'true', restart: 'always', pty: true }, /without a terminal/);
    await bad({ cmd: 'true', restart: 'always', stdin: true }, /without a terminal/);
    await bad({ cmd: 'true', max_restarts: 3 }, /max_restarts needs restart/);
    await bad({ cmd: 'true', restart: 'always', max_restarts: -1 }, /max_restarts must be/);
    await bad({ cmd: 'true', restart: 'always', max_restarts: 1.5 }, /max_restarts must be/);
  });
  it('kills the current run when the VM is deleted (the stand-in guest is this host)', async () => {
    const r = await d.call('POST', P, { cmd: 'sleep', args: ['100'], restart: 'always' });
    expect((await d.call('POST', `${P}/${r.json.id}/signal`, { signal: 'HUP' })).status).to.equal(204);
    const second = await waitFor('the second run', 10_000, async () => {
      const j = (await d.call('GET', `${P}/${r.json.id}`)).json;
      return j.restarts === 1 && j.pid !== r.json.pid ? (j.pid as number) : undefined;
    });
    expect((await d.call('DELETE', '/vms/rv')).status).to.equal(200);
    await waitFor('its run to die', 5000, () => {
      try {
        process.kill(second, 0);
        return undefined;
      } catch {
        return true;
      }
    });
    expect(keeper(r.json.id)).to.equal(false);
  });
});
