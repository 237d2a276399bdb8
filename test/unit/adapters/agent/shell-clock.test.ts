import { expect } from 'chai';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ShellClock } from '../../../../src/adapters/agent/shell-clock.js';

describe('adapters/agent/shell-clock', () => {
  let dir: string;
  let calls: string;
  let date: string;
  let clock: ShellClock;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'svc-clock-'));
    calls = join(dir, 'calls');
    date = join(dir, 'da te'); // a space: the path reaches the shell quoted
    // A stand-in `date`: notes its arguments and its parent (the shell that ran it); fails on @13.
    writeFileSync(date, `#!/bin/sh\necho "$PPID $*" >> '${calls}'\n[ "$3" = "@13" ] && { echo "date: cannot set date: Operation not permitted" >&2; exit 1; }\necho "would print the date"\n`);
    chmodSync(date, 0o755);
    clock = new ShellClock('/bin/sh', date);
  });
  afterEach(() => {
    clock.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const seen = () => readFileSync(calls, 'utf8').trim().split('\n').map((l) => l.split(' '));

  it('runs date -u -s @SECONDS, every call through the same kept shell', async () => {
    await clock.set(1_700_000_000);
    await Promise.all([clock.set(1_700_000_001), clock.set(1_700_000_002)]);
    const lines = seen();
    expect(lines.map((l) => l.slice(1).join(' '))).to.deep.equal(['-u -s @1700000000', '-u -s @1700000001', '-u -s @1700000002']);
    expect(new Set(lines.map((l) => l[0])).size).to.equal(1);
    expect(Number(lines[0][0])).to.not.equal(process.pid);
  });

  it('fails with what date said when date fails, and goes on working', async () => {
    let err: Error | undefined;
    await clock.set(13).catch((e: Error) => { err = e; });
    expect(err?.message).to.match(/exited with 1: date: cannot set date: Operation not permitted/);
    expect(err?.message).to.not.include('would print');
    await clock.set(14);
    expect(seen().map((l) => l[3])).to.deep.equal(['@13', '@14']);
  });

  it('starts a new shell when the kept one is gone, and refuses what is not a time', async () => {
    await clock.set(100);
    const first = seen()[0][0];
    process.kill(Number(first), 'SIGKILL');
    await new Promise((r) => setTimeout(r, 100));
    await clock.set(101);
    await clock.set(102);
    const [, second, third] = seen().map((l) => l[0]);
    expect(second).to.not.equal(first);
    expect(third).to.equal(second);
    for (const bad of [-1, 1.5, Number.NaN]) {
      let err: Error | undefined;
      await clock.set(bad).catch((e: Error) => { err = e; });
      expect(err?.message).to.match(/not a time/);
    }
  });

  it('sets the clock the plain way when there is no shell', async () => {
    const plain = new ShellClock(join(dir, 'no-such-sh'), date);
    try {
      await plain.set(200);
      expect(seen()[0]).to.deep.equal([String(process.pid), '-u', '-s', '@200']);
    } finally {
      plain.close();
    }
  });
});
