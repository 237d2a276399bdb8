import { expect } from 'chai';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { LinuxSystemIdentity, renewHostKeysScript } from '../../../../src/adapters/agent/linux-system-identity.js';
import type { SysCalls } from '../../../../src/adapters/agent/sys-calls.js';

describe('adapters/agent/linux-system-identity', () => {
  let dir: string;
  let root: string;
  let tools: string;
  let calls: string;
  let identity: LinuxSystemIdentity;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'svc-identity-'));
    root = join(dir, 'root');
    tools = join(dir, 'tools');
    calls = join(dir, 'calls');
    for (const d of ['proc/sys/kernel', 'etc']) mkdirSync(join(root, d), { recursive: true });
    writeFileSync(join(root, 'etc/hostname'), 'old\n');
    mkdirSync(tools);
    symlinkSync('/bin/sh', join(tools, 'sh'));
    symlinkSync('/bin/mkdir', join(tools, 'mkdir'));
    // Stand-ins for `date` and `ip`: note their arguments and the process that ran them; `date`
    // refuses @13, as a guest without the right to set the clock would.
    const stand = (name: string, extra = '') => {
      writeFileSync(
        join(tools, name),
        `#!/bin/sh\necho "$PPID ${name} $*" >> '${calls}'\n${extra}echo "would print something"\n`,
      );
      chmodSync(join(tools, name), 0o755);
    };
    stand('date', `[ "$3" = "@13" ] && { echo "date: cannot set date: Operation not permitted" >&2; exit 1; }\n`);
    stand('ip');
    identity = new LinuxSystemIdentity(tools, root, undefined, null);
  });
  afterEach(() => {
    identity.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const read = (p: string) => readFileSync(join(root, p), 'utf8');
  const seen = () =>
    existsSync(calls)
      ? readFileSync(calls, 'utf8')
          .trim()
          .split('\n')
          .map((l) => l.split(' '))
      : [];

  it("without the addon: applies a clone's identity, every call through one kept shell, and writes no notes", async () => {
    const notes = join(dir, 'state', 'identity');
    await identity.apply({
      hostname: 'web-1',
      time_ms: 1_700_000_000_999,
      machine_id: 'ab'.repeat(16),
      overlay_ip: '10.77.0.5/24',
    });
    expect(read('proc/sys/kernel/hostname')).to.equal('web-1');
    expect(read('etc/hostname')).to.equal('web-1\n');
    expect(read('etc/hosts')).to.equal('127.0.0.1 localhost web-1\n');
    expect(read('etc/machine-id')).to.equal(`${'ab'.repeat(16)}\n`);
    expect(existsSync(notes)).to.equal(false);
    await identity.apply({ hostname: 'web-1', time_ms: 1_700_000_001_000 });
    const lines = seen();
    expect(lines.map((l) => l.slice(1).join(' '))).to.deep.equal([
      'date -u -s @1700000000',
      'ip addr flush dev eth1',
      'ip addr add 10.77.0.5/24 dev eth1',
      'ip link set eth1 up',
      'date -u -s @1700000001',
    ]);
    expect(new Set(lines.map((l) => l[0])).size, 'one shell ran them all').to.equal(1);
    expect(Number(lines[0][0])).to.not.equal(process.pid);
  });

  it("runs a restored copy's userdata in the background, as a boot does, its old marker gone first", async () => {
    const state = join(dir, 'state');
    mkdirSync(state);
    writeFileSync(join(state, 'userdata-ran'), ''); // the snapshot's boot left one
    const out = join(dir, 'ud-out');
    const script = `#!/bin/sh\nsleep 0.3\necho "ran in $(pwd)" > '${out}'\necho to-the-log\nexit 3\n`;
    await identity.apply(
      { hostname: 'web-3', time_ms: 1_700_000_000_000, machine_id: 'ab'.repeat(16), userdata: script },
      join(state, 'identity'),
    );
    expect(existsSync(join(state, 'userdata-ran')), 'the marker goes before the answer').to.equal(false);
    expect(readFileSync(join(state, 'userdata'), 'utf8')).to.equal(script);
    for (let i = 0; i < 100 && !existsSync(join(state, 'userdata-ran')); i++)
      await new Promise((r) => setTimeout(r, 50));
    expect(existsSync(join(state, 'userdata-ran'))).to.equal(true);
    expect(readFileSync(join(state, 'userdata-exit'), 'utf8').trim()).to.equal('3');
    expect(readFileSync(out, 'utf8').trim()).to.equal('ran in /');
    expect(read('var/log/userdata.log').trim()).to.equal('to-the-log');
  });

  it('runs userdata once when the identity call comes again (the daemon tried again after a timeout)', async () => {
    const state = join(dir, 'state');
    mkdirSync(state);
    const out = join(dir, 'ud-runs');
    const script = `#!/bin/sh\necho run >> '${out}'\n`;
    const call = () =>
      identity.apply(
        { hostname: 'web-4', time_ms: 1_700_000_000_000, machine_id: 'cd'.repeat(16), userdata: script },
        join(state, 'identity'),
      );
    await call();
    await call();
    for (let i = 0; i < 100 && !existsSync(join(state, 'userdata-ran')); i++)
      await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, 300)); // a second run, had one started, has ended by now
    expect(readFileSync(out, 'utf8')).to.equal('run\n');
  });

  it('grows the root filesystem when told the disk size, never on a test root by default', async () => {
    const grown: number[] = [];
    const growing = new LinuxSystemIdentity(
      tools,
      root,
      undefined,
      null,
      () => undefined,
      async (b) => {
        grown.push(b);
      },
    );
    try {
      await growing.apply({ hostname: 'web-3', time_ms: 1_700_000_000_000 });
      await growing.apply({ hostname: 'web-3', time_ms: 1_700_000_000_000, disk_bytes: 3 * 2 ** 30 });
      expect(grown).to.deep.equal([3 * 2 ** 30]);
    } finally {
      growing.close();
    }
    expect((identity as unknown as { growRoot?: unknown }).growRoot).to.equal(undefined);
  });

  it("renews a clone's SSH host keys (a new machine id), not a restore's; never on a test's root by default", async () => {
    let renewed = 0;
    const withKeys = new LinuxSystemIdentity(tools, root, undefined, null, () => void renewed++);
    try {
      await withKeys.apply({ hostname: 'web-3', time_ms: 1_700_000_000_000 });
      expect(renewed).to.equal(0);
      await withKeys.apply({ hostname: 'web-3', time_ms: 1_700_000_000_000, machine_id: 'ef'.repeat(16) });
      expect(renewed).to.equal(1);
    } finally {
      withKeys.close();
    }
    // The default is bound to the real root only: this one (a temporary root) has none to call.
    expect((identity as unknown as { renewKeys?: unknown }).renewKeys).to.equal(undefined);
  });

  it("makes a clone's SSH host keys anew, of the types it had; ed25519 and ECDSA when it had none", () => {
    const ssh = join(dir, 'etc ssh');
    mkdirSync(ssh);
    const key = (t: string) => join(ssh, `ssh_host_${t}_key`);
    const renew = () => execFileSync('sh', ['-c', renewHostKeysScript(ssh, false)]);
    const keys = () =>
      Object.fromEntries(
        ['rsa', 'ecdsa', 'ed25519', 'bogus']
          .filter((t) => existsSync(key(t)))
          .map((t) => [t, readFileSync(key(t), 'utf8') + readFileSync(`${key(t)}.pub`, 'utf8')]),
      );
    renew();
    const first = keys();
    expect(Object.keys(first).sort()).to.deep.equal(['ecdsa', 'ed25519']);
    expect(first.ed25519).to.include('ssh-ed25519 ');
    // One of a type ssh-keygen cannot make is kept as it was, and none of another type is added.
    writeFileSync(key('bogus'), 'old private\n');
    writeFileSync(`${key('bogus')}.pub`, 'old public\n');
    renew();
    const second = keys();
    expect(Object.keys(second).sort()).to.deep.equal(['bogus', 'ecdsa', 'ed25519']);
    expect(second.ecdsa).to.not.equal(first.ecdsa);
    expect(second.ed25519).to.not.equal(first.ed25519);
    expect(second.bogus).to.equal('old private\nold public\n');
    expect(readdirSync(ssh).filter((f) => f.includes('.new'))).to.deep.equal([]);
  });

  it('without the addon: mixes the entropy into the pool through its file', async () => {
    mkdirSync(join(root, 'dev'));
    await identity.apply({ hostname: 'web-2', time_ms: 1_700_000_000_000, entropy: 'cd'.repeat(32) });
    expect(read('dev/urandom')).to.equal('cd'.repeat(32));
  });

  it('fails with what date said, leaves the hostname alone, and goes on working', async () => {
    let err: Error | undefined;
    await identity.apply({ hostname: 'web-2', time_ms: 13_500 }).catch((e: Error) => {
      err = e;
    });
    expect(err?.message).to.match(/cannot apply the identity: exit 1: date: cannot set date: Operation not permitted/);
    expect(err?.message).to.not.include('would print');
    expect(read('etc/hostname')).to.equal('old\n');
    await identity.apply({ hostname: 'web-2', time_ms: 14_000 });
    expect(read('etc/hostname')).to.equal('web-2\n');
  });

  it('takes names with quotes and spaces in its paths as they are', async () => {
    const odd = join(dir, "it's a dir");
    const other = new LinuxSystemIdentity(tools, odd, undefined, null);
    try {
      for (const d of ['proc/sys/kernel', 'etc']) mkdirSync(join(odd, d), { recursive: true });
      await other.apply({ hostname: 'web-3', time_ms: 20_000 });
      expect(readFileSync(join(odd, 'etc/hostname'), 'utf8')).to.equal('web-3\n');
      expect(readFileSync(join(odd, 'etc/hosts'), 'utf8')).to.equal('127.0.0.1 localhost web-3\n');
    } finally {
      other.close();
    }
  });

  it('fails when a file it must write cannot be written, and says which', async () => {
    rmSync(join(root, 'proc'), { recursive: true });
    let err: Error | undefined;
    await identity.apply({ hostname: 'web-4', time_ms: 30_000 }).catch((e: Error) => {
      err = e;
    });
    expect(err?.message).to.match(/cannot apply the identity: exit \d+: .*proc\/sys\/kernel\/hostname/);
  });

  describe('with the svc-sys addon', () => {
    // A stand-in for the addon: notes its calls, keeps a kernel hostname, refuses times before 1 s.
    const fakeSys = (log: string[], kernel = { name: 'old' }): SysCalls => ({
      setTime: (ms) => {
        if (ms < 1000) throw Object.assign(new Error('settimeofday: Operation not permitted'), { code: 'EPERM' });
        log.push(`time ${ms}`);
      },
      setHostname: (name) => {
        log.push(`hostname ${name}`);
        kernel.name = name;
      },
      hostname: () => kernel.name,
    });

    it("applies a clone's identity in the agent's process: no date, no shell, the files written", async () => {
      const log: string[] = [];
      const inProcess = new LinuxSystemIdentity(tools, root, undefined, fakeSys(log));
      try {
        await inProcess.apply({ hostname: 'web-5', time_ms: 1_700_000_000_999, machine_id: 'cd'.repeat(16) });
        expect(log).to.deep.equal(['time 1700000000999', 'hostname web-5']);
        expect(read('etc/hostname')).to.equal('web-5\n');
        expect(read('etc/hosts')).to.equal('127.0.0.1 localhost web-5\n');
        expect(read('etc/machine-id')).to.equal(`${'cd'.repeat(16)}\n`);
        expect(seen(), 'no tool ran').to.deep.equal([]);
      } finally {
        inProcess.close();
      }
    });

    it("reseeds the kernel's generator with the host's bytes, and fails the identity when it cannot", async () => {
      const log: string[] = [];
      const sys = { ...fakeSys(log), reseed: (b: Buffer) => void log.push(`reseed ${b.toString('hex')}`) };
      const inProcess = new LinuxSystemIdentity(tools, root, undefined, sys);
      try {
        await inProcess.apply({ hostname: 'web-8', time_ms: 1_700_000_000_000, entropy: '5a'.repeat(32) });
        expect(log).to.deep.equal(['time 1700000000000', `reseed ${'5a'.repeat(32)}`, 'hostname web-8']);
        sys.reseed = () => {
          throw new Error('reseed: Operation not permitted');
        };
        let err: Error | undefined;
        await inProcess
          .apply({ hostname: 'web-9', time_ms: 1_700_000_000_000, entropy: '00'.repeat(32) })
          .catch((e: Error) => {
            err = e;
          });
        expect(err?.message).to.equal('cannot reseed the random generator: reseed: Operation not permitted');
        // An addon from before the reseed: the bytes are mixed into the pool through its file.
        mkdirSync(join(root, 'dev'));
        const older = new LinuxSystemIdentity(tools, root, undefined, fakeSys([]));
        await older.apply({ hostname: 'web-10', time_ms: 1_700_000_000_000, entropy: 'ab'.repeat(32) });
        older.close();
        expect(readFileSync(join(root, 'dev/urandom')).toString('hex')).to.equal('ab'.repeat(32));
      } finally {
        inProcess.close();
      }
    });

    it('a restore that keeps its name only sets the clock; an overlay address still goes through ip', async () => {
      const log: string[] = [];
      const inProcess = new LinuxSystemIdentity(tools, root, undefined, fakeSys(log, { name: 'web-6' }));
      try {
        writeFileSync(join(root, 'etc/hosts'), 'edited by the user\n');
        await inProcess.apply({ hostname: 'web-6', time_ms: 1_800_000_000_000 });
        expect(log).to.deep.equal(['time 1800000000000']);
        expect(read('etc/hostname'), 'left as it was').to.equal('old\n');
        expect(read('etc/hosts')).to.equal('edited by the user\n');
        await inProcess.apply({ hostname: 'web-7', time_ms: 1_800_000_001_000, overlay_ip: '10.77.0.9/24' });
        expect(log.slice(1)).to.deep.equal(['time 1800000001000', 'hostname web-7']);
        expect(read('etc/hostname')).to.equal('web-7\n');
        expect(seen().map((l) => l.slice(1).join(' '))).to.deep.equal([
          'ip addr flush dev eth1',
          'ip addr add 10.77.0.9/24 dev eth1',
          'ip link set eth1 up',
        ]);
      } finally {
        inProcess.close();
      }
    });

    it('fails with what the system call said and leaves the hostname alone', async () => {
      const log: string[] = [];
      const inProcess = new LinuxSystemIdentity(tools, root, undefined, fakeSys(log));
      try {
        let err: Error | undefined;
        await inProcess.apply({ hostname: 'web-8', time_ms: 500 }).catch((e: Error) => {
          err = e;
        });
        expect(err?.message).to.equal('cannot apply the identity: settimeofday: Operation not permitted');
        expect(log).to.deep.equal([]);
        expect(read('etc/hostname')).to.equal('old\n');
      } finally {
        inProcess.close();
      }
    });

    it('fails when /etc/hostname cannot be written, and says which file', async () => {
      const inProcess = new LinuxSystemIdentity(tools, root, undefined, fakeSys([]));
      try {
        rmSync(join(root, 'etc'), { recursive: true });
        let err: Error | undefined;
        await inProcess.apply({ hostname: 'web-9', time_ms: 40_000 }).catch((e: Error) => {
          err = e;
        });
        expect(err?.message).to.match(/cannot apply the identity: .*etc\/hostname/);
      } finally {
        inProcess.close();
      }
    });
  });
});
