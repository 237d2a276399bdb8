import { expect } from 'chai';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildCli } from '../../../../src/adapters/cli/cli.js';
import { ms } from '../../../../src/adapters/cli/format.js';
import { lastLinesStart } from '../../../../src/adapters/cli/console-logs.js';
import { envOption, errorText, guestCommandLine, restartOption, size } from '../../../../src/adapters/cli/cli-kit.js';

describe('svc CLI: svc run --restart', () => {
  it("takes docker's words for a restart policy", () => {
    expect(restartOption('always')).to.deep.equal({ restart: 'always' });
    expect(restartOption('on-failure')).to.deep.equal({ restart: 'on-failure' });
    expect(restartOption('on-failure:3')).to.deep.equal({ restart: 'on-failure', max_restarts: 3 });
    expect(restartOption('no')).to.deep.equal({});
    for (const bad of ['sometimes', 'on-failure:', 'on-failure:x', 'no:2', 'always:-1'])
      expect(() => restartOption(bad), bad).to.throw(/--restart must be/);
  });
});

describe('svc CLI: -e/--env of svc x and svc run', () => {
  it("takes NAME=VALUE as given and NAME alone from this shell's environment, the last of a name twice", () => {
    const here = { TOKEN: 's3cret', EMPTY: '' };
    expect(envOption([], here)).to.equal(undefined);
    expect(envOption(['A=x=y', 'TOKEN', 'EMPTY', 'B=', 'A=2'], here)).to.deep.equal({
      A: '2',
      TOKEN: 's3cret',
      EMPTY: '',
      B: '',
    });
  });

  it('refuses a NAME this shell does not have, and an empty name', () => {
    expect(() => envOption(['MISSING'], {})).to.throw(
      '--env MISSING: MISSING is not set in this shell (give NAME=VALUE)',
    );
    expect(() => envOption(['=x'], {})).to.throw('--env takes NAME=VALUE or NAME, not "=x"');
  });
});

describe('svc CLI: the guest command line of svc x, svc run and svc ssh', () => {
  const program = buildCli();
  const line = (...words: string[]) =>
    guestCommandLine(program, ['node', 'svc', ...words], { x: 1, run: 1, ssh: 1 }).slice(2);

  it('puts -- before the command, so its flags are its own (svc x web ls -la)', () => {
    expect(line('x', 'web', 'ls', '-la', '/srv')).to.deep.equal(['x', 'web', '--', 'ls', '-la', '/srv']);
    expect(line('exec', 'web', 'python3', '-c', 'print(1)')).to.deep.equal([
      'exec',
      'web',
      '--',
      'python3',
      '-c',
      'print(1)',
    ]);
    // a command's flag that is also one of svc x's (-e, -t) is the command's after its name
    expect(line('x', 'web', 'grep', '-e', 'x', 'f')).to.deep.equal(['x', 'web', '--', 'grep', '-e', 'x', 'f']);
    expect(line('ssh', 'web', 'ls', '-t')).to.deep.equal(['ssh', 'web', '--', 'ls', '-t']);
    expect(line('run', '-d', 'web', 'sleep', '9')).to.deep.equal(['run', '-d', 'web', '--', 'sleep', '9']);
  });

  it("keeps svc's own options before the command, values and all, and global ones before the verb", () => {
    expect(line('x', '-e', 'A=1', 'web', '--user', 'svc', '--cwd=/tmp', 'id', '-u')).to.deep.equal([
      'x',
      '-e',
      'A=1',
      'web',
      '--user',
      'svc',
      '--cwd=/tmp',
      '--',
      'id',
      '-u',
    ]);
    expect(line('--socket', '/tmp/s', 'x', 'web', 'ls', '-l')).to.deep.equal([
      '--socket',
      '/tmp/s',
      'x',
      'web',
      '--',
      'ls',
      '-l',
    ]);
  });

  it('leaves a line that has its -- already, one with no command yet, and other verbs as they are', () => {
    for (const words of [
      ['x', 'web', '--', 'ls', '-la'],
      ['x', '--help'],
      ['x', 'web'],
      ['ssh', 'web'],
      ['cp', 'a', 'web:/b'],
      ['fwd', 'add', 'web', '8080'],
    ])
      expect(line(...words)).to.deep.equal(words);
  });
});

describe("svc CLI: an error of this host's files", () => {
  it('is said as PATH: what went wrong, not as the system call Node names', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-cli-errors-'));
    try {
      const missing = join(dir, 'nope');
      const caught = (f: () => unknown) => {
        try {
          f();
        } catch (err) {
          return err;
        }
        throw new Error('no error');
      };
      expect(errorText(caught(() => statSync(missing)))).to.equal(`${missing}: no such file or directory`);
      const file = join(dir, 'f');
      writeFileSync(file, 'x');
      expect(errorText(await readFile(join(file, 'x')).catch((e: unknown) => e))).to.equal(
        `${join(file, 'x')}: not a directory`,
      );
      // an error without a path (reading a directory) keeps Node's words
      expect(errorText(await readFile(dir).catch((e: unknown) => e))).to.match(/^EISDIR: /);
      expect(errorText(new Error('vm a not found'))).to.equal('vm a not found');
      expect(errorText('plain')).to.equal('plain');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('svc CLI: --memory and --disk', () => {
  it("take a number in their unit, or one with docker's and Multipass's units, when it is whole in theirs", () => {
    const mb = size('MB', '1024');
    const gb = size('GB', '10');
    expect(['1024', '1g', '1G', '1GiB', '1gb', '1.5g', '512m', '512MB', '2048k', ' 2g '].map(mb)).to.deep.equal([
      1024, 1024, 1024, 1024, 1024, 1536, 512, 512, 2, 2048,
    ]);
    expect(['10', '10G', '10g', '10GiB', '1t', '2048m', '0.5t'].map(gb)).to.deep.equal([10, 10, 10, 10, 1024, 2, 512]);
    for (const bad of ['', 'g', '1x', '-1', '1.5', '1 gigabyte', '100k'])
      expect(() => mb(bad), bad).to.throw(/expected a whole number of MB, such as 1024/);
    for (const bad of ['1.5', '1500m', '1g5']) expect(() => gb(bad), bad).to.throw(/whole number of GB/);
  });
});

describe('svc CLI: durations (svc stats, svc activity, progress)', () => {
  it('says short ones in ms and s, longer ones in minutes, hours and days', () => {
    expect([850, 4200, 59_949, 60_000, 1_274_300, 3_600_000, 7_380_000, 86_400_000, 273_600_000].map(ms)).to.deep.equal(
      ['850 ms', '4.2 s', '59.9 s', '1m00s', '21m14s', '1h00m', '2h03m', '1d00h', '3d04h'],
    );
  });
});

describe('svc logs -n: the console log', () => {
  it('finds where its last N lines start, as tail -n counts them, or says it cannot tell from the bytes read', () => {
    const b = Buffer.from('cut\na\nb\nc\n');
    expect(b.subarray(lastLinesStart(b, 2)).toString()).to.equal('b\nc\n');
    expect(b.subarray(lastLinesStart(b, 3)).toString()).to.equal('a\nb\nc\n');
    expect(lastLinesStart(b, 0)).to.equal(b.length);
    expect(lastLinesStart(b, 4), 'its first line may be cut: more must be read').to.equal(undefined);
    const open = Buffer.from('x\ny\nno newline yet');
    expect(open.subarray(lastLinesStart(open, 1)).toString()).to.equal('no newline yet');
    expect(open.subarray(lastLinesStart(open, 2)).toString()).to.equal('y\nno newline yet');
    expect(lastLinesStart(Buffer.alloc(0), 1)).to.equal(undefined);
    // a newline first: nothing before it to count
    expect(lastLinesStart(Buffer.from('\na\nb\n'), 3)).to.equal(undefined);
    expect(lastLinesStart(Buffer.from('\na\nb\n'), 2)).to.equal(1);
  });
});
