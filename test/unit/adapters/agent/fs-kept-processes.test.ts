import { expect } from 'chai';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { EtcGuestUsers } from '../../../../src/adapters/agent/etc-guest-users.js';
import { findHelpers, FsKeptProcesses } from '../../../../src/adapters/agent/fs-kept-processes.js';
import { isOutputFrame, isWatchEvent } from '../../../../src/adapters/guest-link/http-guest-processes.js';
import { tempDir } from '../../../helpers/daemon.js';

const seg = (n: number) => String(n).padStart(20, '0');

/** One read through a reader of its own, as a caller that reads once does. */
async function readOnce(kept: FsKeptProcesses, id: string, stream: 'stdout' | 'stderr', from: number, max: number) {
  const r = kept.reader(id, stream);
  try {
    return await r.read(from, max);
  } finally {
    await r.close();
  }
}

describe('adapters/agent/fs-kept-processes: reading journals', () => {
  let root: string;
  let kept: FsKeptProcesses;
  beforeEach(() => {
    root = tempDir('svc-kept-');
    kept = new FsKeptProcesses(root, null);
    const dir = join(root, 'p1');
    mkdirSync(dir);
    writeFileSync(
      join(dir, 'meta.json'),
      JSON.stringify({
        id: 'p1',
        kind: 'process',
        pid: 1,
        keeper_pid: 0,
        cmd: 'x',
        args: [],
        pty: false,
        stdin: false,
        started_at: '',
        boot_id: 'other',
        host: 'h',
      }),
    );
    // kept: [100, 110) and, after a gap, [120, 125); the first 100 bytes are gone
    writeFileSync(join(dir, `stdout.${seg(100)}`), '0123456789');
    writeFileSync(join(dir, `stdout.${seg(120)}`), 'abcde');
  });

  it('reads from an offset inside a segment, moves past what is gone and over gaps', async () => {
    expect(await kept.range('p1', 'stdout')).to.deep.equal({ first: 100, end: 125 });
    expect(await readOnce(kept, 'p1', 'stdout', 104, 100)).to.deep.equal({ offset: 104, data: Buffer.from('456789') });
    expect(await readOnce(kept, 'p1', 'stdout', 0, 3)).to.deep.equal({ offset: 100, data: Buffer.from('012') });
    expect(await readOnce(kept, 'p1', 'stdout', 110, 100)).to.deep.equal({ offset: 120, data: Buffer.from('abcde') });
    expect(await readOnce(kept, 'p1', 'stdout', 125, 100)).to.deep.equal({ offset: 125, data: Buffer.alloc(0) });
    expect(await readOnce(kept, 'p1', 'stderr', 0, 100)).to.deep.equal({ offset: 0, data: Buffer.alloc(0) });
  });

  it('ends a record whose keeper is gone: reboot when the boot changed', async () => {
    const end = await kept.end('p1');
    expect(end?.reason).to.equal('reboot');
    expect(await kept.end('p1')).to.deep.equal(end); // written down, the same next time
  });

  it('says it cannot keep processes without its helpers, and finds them where the build puts them', () => {
    expect(kept.unavailable()).to.match(/svc-keep/);
    // npm run build:agent puts them beside the agent bundle; the unit tier runs after it
    expect(findHelpers()).to.match(/dist\/agent\/node_modules\/svc-bin$/);
  });
});

describe('adapters/agent/etc-guest-users', () => {
  it('finds users by name or number with their groups, and a bare number as itself', async () => {
    const root = tempDir('svc-etc-');
    mkdirSync(join(root, 'etc'));
    writeFileSync(join(root, 'etc', 'passwd'), 'root:x:0:0:root:/root:/bin/sh\nsvc:x:1000:1000::/home/svc:/bin/bash\n');
    writeFileSync(join(root, 'etc', 'group'), 'root:x:0:\nsvc:x:1000:\nsudo:x:27:svc\ndocker:x:999:other,svc\n');
    const users = new EtcGuestUsers(root);
    expect(await users.find('svc')).to.deep.equal({
      name: 'svc',
      uid: 1000,
      gid: 1000,
      groups: [1000, 27, 999],
      home: '/home/svc',
      shell: '/bin/bash',
    });
    expect((await users.find('0'))?.name).to.equal('root');
    expect(await users.find('4242')).to.include({ uid: 4242, gid: 4242, home: '/' });
    expect(await users.find('nobody-here')).to.equal(null);
  });
});

describe('adapters/guest-link/http-guest-processes: what the daemon passes on', () => {
  it('takes the four kinds of frame and nothing else', () => {
    expect(isOutputFrame({ stream: 'stdout', offset: 0, data: 'x' })).to.equal(true);
    expect(isOutputFrame({ stream: 'pty', offset: 3, data: 'eA==', encoding: 'base64' })).to.equal(true);
    expect(isOutputFrame({ truncated: { stream: 'stderr', before: 10 } })).to.equal(true);
    expect(isOutputFrame({ reason: 'exit', exit_code: 0, ended_at: 't' })).to.equal(true);
    expect(isOutputFrame({ start: { stdout: 10, stderr: 0 } })).to.equal(true);
    expect(isOutputFrame({ start: {} })).to.equal(true);
    for (const bad of [
      null,
      1,
      {},
      { stream: 'stdin', offset: 0, data: '' },
      { stream: 'stdout', offset: -1, data: '' },
      { stream: 'stdout', offset: 0, data: 1 },
      { stream: 'stdout', offset: 0, data: '', encoding: 'hex' },
      { truncated: null },
      { reason: 'boom', ended_at: 't' },
      { start: null },
      { start: { stdin: 0 } },
      { start: { stdout: -1 } },
      { start: { stdout: '5' } },
    ])
      expect(isOutputFrame(bad), JSON.stringify(bad)).to.equal(false);
    expect(isWatchEvent({ cursor: 'w1:0', type: 'watching' })).to.equal(true);
    expect(isWatchEvent({ cursor: 'x', type: 'create' })).to.equal(false);
    expect(isWatchEvent({ cursor: 'w1:5', type: 'explode' })).to.equal(false);
  });
});

describe('adapters/agent/fs-kept-processes with the real svc-keep: the end of input', function () {
  this.timeout(20_000);

  it('passes on every byte sent before "eof", even when the keeper reads "eof" first', async () => {
    const helpers = findHelpers();
    expect(helpers, 'npm run build:agent builds svc-keep').to.not.equal(null);
    const kept = new FsKeptProcesses(tempDir('svc-kept-eof-'), helpers);
    const rec = await kept.start({
      kind: 'process',
      cmd: 'cat',
      args: [],
      env: {},
      stdin: true,
      host: 'h',
      capBytes: 1 << 20,
    });
    // The keeper is stopped while the input and its end are both sent, so that one poll finds
    // both FIFOs ready (what a loaded host does now and then): it used to close cat's input first.
    process.kill(rec.keeper_pid, 'SIGSTOP');
    try {
      await kept.stdin(rec.id, Readable.from([Buffer.from('piped in\n')]));
      await kept.control(rec.id, 'eof');
    } finally {
      process.kill(rec.keeper_pid, 'SIGCONT');
    }
    let end = await kept.end(rec.id);
    for (let i = 0; i < 100 && !end; i++) {
      await new Promise((r) => setTimeout(r, 50));
      end = await kept.end(rec.id);
    }
    expect(end).to.include({ code: 0 });
    expect((await readOnce(kept, rec.id, 'stdout', 0, 100)).data.toString()).to.equal('piped in\n');
  });

  it("starts a process with the system's environment (/etc/environment) under its own env", async () => {
    const kept = new FsKeptProcesses(tempDir('svc-kept-env-'), findHelpers(), () => ({
      APP_ENV: 'prod',
      WHO: 'system',
    }));
    const rec = await kept.start({
      kind: 'process',
      cmd: 'sh',
      args: ['-c', 'printf "%s/%s" "$APP_ENV" "$WHO"'],
      env: { WHO: 'request' },
      stdin: false,
      host: 'h',
      capBytes: 1 << 20,
    });
    let end = await kept.end(rec.id);
    for (let i = 0; i < 100 && !end; i++) {
      await new Promise((r) => setTimeout(r, 50));
      end = await kept.end(rec.id);
    }
    expect((await readOnce(kept, rec.id, 'stdout', 0, 100)).data.toString()).to.equal('prod/request');
  });
});
