import { expect } from 'chai';
import { existsSync, mkdirSync, readFileSync, readdirSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tempDir } from '../../../../helpers/temp-dirs.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  callOffSave,
  saveStream,
  sweepMigrationSockets,
} from '../../../../../src/adapters/hypervisor/qemu/saved-state.js';
import type { QmpClient } from '../../../../../src/adapters/hypervisor/qemu/qmp-client.js';

/**
 * A monitor whose `migrate` connects to the socket it is given and writes `body`, then reports the
 * migration `pre-switchover` (when that capability is on) and `completed`, or `failed` when told.
 * Everything asked, and the hooks' calls, land in one list, in order.
 */
function monitor(body: Buffer, log: string[], fail = false) {
  let preSwitchover = false;
  let status = 'setup';
  return {
    async execute<T>(cmd: string, args?: Record<string, unknown>): Promise<T> {
      log.push(cmd);
      if (cmd === 'migrate-set-capabilities')
        preSwitchover = (args!.capabilities as { capability: string; state: boolean }[]).some(
          (c) => c.capability === 'pause-before-switchover' && c.state,
        );
      if (cmd === 'migrate') {
        status = 'active';
        const sock = connect(String(args!.uri).slice('unix:'.length));
        sock.end(body, () => (status = fail ? 'failed' : preSwitchover ? 'pre-switchover' : 'completed'));
      }
      if (cmd === 'migrate-continue') status = 'completed';
      if (cmd === 'query-migrate') return { status } as T;
      return {} as T;
    },
  } as unknown as QmpClient;
}

describe('saveStream: a VM state written whole, the guest held no longer than the stream', () => {
  let dir: string;
  beforeEach(async () => (dir = await mkdtemp(join(tmpdir(), 'svc-save-'))));
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it('stops the guest only once the socket is ready, and runs the streamed hook before the file is named', async () => {
    const body = Buffer.alloc(3 << 20, 0x5a);
    const log: string[] = [];
    let seen: { tmp: number; named: boolean } | undefined;
    await saveStream(monitor(body, log), dir, {
      file: 'cap.state',
      stopFirst: true,
      preSwitchover: async () => void log.push('preSwitchover'),
      streamed: async () => {
        log.push('streamed');
        seen = { tmp: readFileSync(join(dir, 'cap.state.tmp')).length, named: existsSync(join(dir, 'cap.state')) };
      },
    });
    const asked = log.filter((x) => x !== 'query-migrate');
    expect(asked).to.deep.equal([
      'migrate-set-parameters',
      'migrate-set-capabilities',
      'stop',
      'migrate',
      'preSwitchover',
      'migrate-continue',
      'streamed',
    ]);
    // The hook saw every byte in the temporary file, and no file under the final name yet.
    expect(seen).to.deep.equal({ tmp: body.length, named: false });
    expect(readFileSync(join(dir, 'cap.state')).equals(body)).to.equal(true);
    expect(existsSync(join(dir, 'cap.state.tmp'))).to.equal(false);
  });

  it('leaves no file and runs no hook when the migration fails', async () => {
    const log: string[] = [];
    const saving = saveStream(monitor(Buffer.alloc(4096), log, true), dir, {
      streamed: async () => void log.push('streamed'),
    });
    await saving.then(
      () => expect.fail('a failed migration saved a state'),
      (err: Error) => expect(err.message).to.match(/migration failed/),
    );
    expect(log).to.not.include('stop');
    expect(log).to.not.include('streamed');
    expect(existsSync(join(dir, 'state.mig'))).to.equal(false);
    expect(existsSync(join(dir, 'state.mig.tmp'))).to.equal(false);
  });
});

describe('callOffSave: a save a dead daemon left under way in a QEMU found again', () => {
  /** A monitor whose migration is `status`, and goes through `cancelling` to `cancelled` when called off. */
  function found(status: string) {
    const asked: string[] = [];
    const qmp = {
      async execute<T>(cmd: string): Promise<T> {
        asked.push(cmd);
        if (cmd === 'migrate_cancel') status = 'cancelling';
        else if (cmd === 'query-migrate' && status === 'cancelling') {
          const now = status;
          status = 'cancelled';
          return { status: now } as T;
        }
        return (cmd === 'query-migrate' ? (status === 'none' ? {} : { status }) : {}) as T;
      },
    };
    return { qmp, asked };
  }

  it('calls off one waiting before its switch-over (or streaming) and resolves once QEMU says it is over', async () => {
    for (const status of ['pre-switchover', 'active', 'device']) {
      const { qmp, asked } = found(status);
      expect(await callOffSave(qmp), status).to.equal(true);
      expect(asked, status).to.deep.equal(['query-migrate', 'migrate_cancel', 'query-migrate', 'query-migrate']);
    }
  });

  it('leaves alone a QEMU with no save under way, or one that ended', async () => {
    for (const status of ['none', 'completed', 'failed', 'cancelled']) {
      const { qmp, asked } = found(status);
      expect(await callOffSave(qmp), status).to.equal(false);
      expect(asked, status).to.deep.equal(['query-migrate']);
    }
  });

  it('throws when the save does not end in time', async () => {
    const stuck = { execute: async <T>(cmd: string) => (cmd === 'query-migrate' ? { status: 'active' } : {}) as T };
    const err = await callOffSave(stuck, 60).catch((e: Error) => e);
    expect((err as Error).message).to.equal('the save left under way is still active after 60 ms');
  });
});

describe('sweepMigrationSockets: the socket folders of daemons that died in a save', () => {
  it("removes those whose daemon is gone and leaves a live one's, its own and what is not one", async () => {
    const root = tempDir();
    // a pid that was a process and has ended
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))']).stdout.toString();
    const names = [
      `svc-mig-${gone}-aB12cd`,
      `svc-mig-${process.pid}-xY34ef`,
      `svc-mig-${process.ppid}-gh56IJ`,
      'svc-mig-kl78mn',
      'svc-ram-1-op90qr',
    ];
    for (const n of names) mkdirSync(join(root, n));
    expect(await sweepMigrationSockets(root)).to.equal(1);
    expect(readdirSync(root).sort()).to.deep.equal(names.slice(1).sort());
  });

  it('names the folder of a save after the daemon, and removes it when the save ends', async () => {
    const before = new Set(readdirSync(tmpdir()).filter((n) => n.startsWith(`svc-mig-${process.pid}-`)));
    const dir = await mkdtemp(join(tmpdir(), 'svc-state-'));
    const seen: string[] = [];
    const qmp = monitor(Buffer.from('state'), []);
    const execute = qmp.execute.bind(qmp);
    qmp.execute = async <T>(cmd: string, args?: Record<string, unknown>): Promise<T> => {
      if (cmd === 'migrate') seen.push(String(args?.uri));
      return execute<T>(cmd, args);
    };
    try {
      await saveStream(qmp as unknown as QmpClient, dir);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    expect(seen[0]).to.match(new RegExp(`^unix:${tmpdir()}/svc-mig-${process.pid}-[^/]+/m\\.sock$`));
    expect(
      readdirSync(tmpdir()).filter((n) => n.startsWith(`svc-mig-${process.pid}-`) && !before.has(n)),
    ).to.deep.equal([]);
  });
});
