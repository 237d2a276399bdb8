import { expect } from 'chai';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KeptShell } from '../../../../src/adapters/agent/kept-shell.js';
import { shellWord } from '../../../../src/adapters/process-kit/shell-word.js';

describe('adapters/agent/kept-shell', () => {
  let dir: string;
  let calls: string;
  let shell: KeptShell;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'svc-shell-'));
    calls = join(dir, 'calls');
    shell = new KeptShell('/bin/sh');
  });
  afterEach(() => {
    shell.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const note = (what: string) => `echo "$$ ${what}" >> ${shellWord(calls)}`;
  const seen = () =>
    readFileSync(calls, 'utf8')
      .trim()
      .split('\n')
      .map((l) => l.split(' '));

  it('runs every line through the same shell, one after another, and answers its status', async () => {
    expect(await shell.run(note('one'))).to.deep.equal({ status: 0, said: [] });
    const answers = await Promise.all([shell.run(`${note('two')}; false`), shell.run(note('three'))]);
    expect(answers.map((a) => a.status)).to.deep.equal([1, 0]);
    const lines = seen();
    expect(lines.map((l) => l[1])).to.deep.equal(['one', 'two', 'three']);
    expect(new Set(lines.map((l) => l[0])).size).to.equal(1);
    expect(Number(lines[0][0])).to.not.equal(process.pid);
  });

  it('answers what a failing line printed, and keeps only its own lines', async () => {
    const a = await shell.run(`{ echo first; echo "second it's"; ls ${shellWord(join(dir, 'no such'))}; } 2>&1`);
    expect(a.status).to.not.equal(0);
    expect(a.said.slice(0, 2)).to.deep.equal(['first', "second it's"]);
    expect(a.said.join(' ')).to.match(/no such/);
    expect(await shell.run('true')).to.deep.equal({ status: 0, said: [] });
  });

  it('starts a new shell when the kept one is gone', async () => {
    await shell.run(note('a'));
    const first = seen()[0][0];
    process.kill(Number(first), 'SIGKILL');
    await new Promise((r) => setTimeout(r, 100));
    await shell.run(note('b'));
    await shell.run(note('c'));
    const [, second, third] = seen().map((l) => l[0]);
    expect(second).to.not.equal(first);
    expect(third).to.equal(second);
  });

  it('runs the line once by `sh -c` when the kept shell does not answer', async () => {
    // A shell that swallows what it is given on stdin and only runs what comes with -c.
    const mute = join(dir, 'mute sh');
    writeFileSync(mute, `#!/bin/sh\n[ "$1" = "-c" ] && exec /bin/sh "$@"\nexec cat > /dev/null\n`);
    chmodSync(mute, 0o755);
    const slow = new KeptShell(mute, 300);
    try {
      const a = await slow.run(`${note('plain')}; echo said; (exit 3)`);
      expect(a).to.deep.equal({ status: 3, said: ['said'] });
      expect(seen().map((l) => l[1])).to.deep.equal(['plain']);
    } finally {
      slow.close();
    }
  });

  it('fails when no shell can run the line', async () => {
    const none = new KeptShell(join(dir, 'no-such-sh'));
    let err: Error | undefined;
    await none.run('true').catch((e: Error) => {
      err = e;
    });
    expect(err?.message).to.match(/did not run the command/);
  });
});
