import { expect } from 'chai';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { STARTED_MARKER, startBootEntrypoint } from '../../../../src/adapters/agent/boot-entrypoint.js';
import type { ProcessInfo, ProcessStart } from '../../../../src/domain/processes.js';
import { InvalidArgumentError } from '../../../../src/domain/errors.js';
import type { Logger } from '../../../../src/ports/logger.js';

/** A logger that keeps what it was told. */
function keptLog(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const log = {
    lines,
    info: (f: Record<string, unknown>, m: string) => void lines.push(`info ${m} ${JSON.stringify(f)}`),
    warn: (f: Record<string, unknown>, m: string) => void lines.push(`warn ${m} ${JSON.stringify(f)}`),
    error: (f: Record<string, unknown>, m: string) => void lines.push(`error ${m} ${JSON.stringify(f)}`),
    debug: () => undefined,
    child: () => log,
  };
  return log as unknown as Logger & { lines: string[] };
}

describe('adapters/agent/boot-entrypoint', () => {
  let dir: string;
  let started: ProcessStart[];
  const start = async (req: ProcessStart): Promise<ProcessInfo> => {
    started.push(req);
    return { id: `p${started.length}`, pid: 100 + started.length, cmd: req.cmd } as ProcessInfo;
  };

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'svc-entrypoint-'));
    started = [];
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('starts the file as a process tagged entrypoint, once per run directory (boot), however many agents start', async () => {
    const file = join(dir, 'entrypoint.json');
    writeFileSync(file, JSON.stringify({ cmd: '/bin/app', args: ['serve'], user: 'app', cwd: '/srv', tag: 'other' }));
    const run = join(dir, 'run');
    const log = keptLog();
    mkdirSync(run);
    // Two agents at once (a restart racing a deploy): one starts it.
    const [a, b] = await Promise.all([
      startBootEntrypoint(file, run, start, log),
      startBootEntrypoint(file, run, start, log),
    ]);
    expect([a, b].filter(Boolean)).to.have.length(1);
    expect(started).to.deep.equal([{ cmd: '/bin/app', args: ['serve'], user: 'app', cwd: '/srv', tag: 'entrypoint' }]);
    expect(existsSync(join(run, STARTED_MARKER))).to.equal(true);
    // An agent started again in the same boot (killed, deployed anew, or a restored guest's) leaves it.
    expect(await startBootEntrypoint(file, run, start, log)).to.equal(undefined);
    expect(started).to.have.length(1);
    // A new boot has a new run directory: it starts again.
    const run2 = join(dir, 'run2');
    mkdirSync(run2);
    expect(await startBootEntrypoint(file, run2, start, log)).to.include({ id: 'p2' });
    expect(log.lines.filter((l) => l.startsWith('info entrypoint started'))).to.have.length(2);
  });

  it('says in the log why a file it cannot take started nothing, and does not try again that boot', async () => {
    const log = keptLog();
    const cases: [string, string | undefined, RegExp][] = [
      ['bad-json', '{"cmd": ', /JSON/],
      ['bad-user', JSON.stringify({ cmd: 'x', user: 'a b' }), /user must be a user name or number, got .{1,2}a b/],
      ['no-cmd', JSON.stringify({ args: ['x'] }), /cmd must be a string/],
      ['missing', undefined, /ENOENT/],
      ['huge', JSON.stringify({ cmd: 'x', args: ['y'.repeat(3 << 20)] }), /larger than/],
    ];
    for (const [name, text, why] of cases) {
      const file = join(dir, `${name}.json`);
      if (text !== undefined) writeFileSync(file, text);
      const run = join(dir, `run-${name}`);
      mkdirSync(run);
      expect(await startBootEntrypoint(file, run, start, log), name).to.equal(undefined);
      expect(log.lines.at(-1), name).to.match(/^warn entrypoint not started/);
      expect(log.lines.at(-1), name).to.match(why);
      expect(await startBootEntrypoint(file, run, start, log), name).to.equal(undefined);
    }
    expect(started).to.deep.equal([]);
    // What the process service refuses (a user the guest lacks) is said too.
    const file = join(dir, 'ok.json');
    writeFileSync(file, JSON.stringify({ cmd: 'x', user: 'ghost' }));
    const refuse = async (): Promise<ProcessInfo> => {
      throw new InvalidArgumentError('no user ghost in the guest');
    };
    expect(await startBootEntrypoint(file, dir, refuse, log)).to.equal(undefined);
    expect(log.lines.at(-1)).to.match(/^warn entrypoint not started.*no user ghost in the guest/);
  });
});
