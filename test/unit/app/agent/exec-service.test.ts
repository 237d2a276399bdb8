import { expect } from 'chai';
import { PassThrough } from 'node:stream';
import { ExecService } from '../../../../src/app/agent/exec-service.js';
import {
  SpawnError,
  type ProcessExit,
  type ProcessRunner,
  type RunningProcess,
  type SpawnRequest,
} from '../../../../src/ports/agent/process-runner.js';

/** A scripted process: writes the given chunks, then exits. */
class ScriptedRunner implements ProcessRunner {
  killed = 0;
  asked: SpawnRequest[] = [];
  constructor(
    private readonly script: (p: { out: PassThrough; err: PassThrough; exit: (e: ProcessExit) => void }) => void,
    private readonly fail?: string,
  ) {}
  async spawn(req: SpawnRequest): Promise<RunningProcess> {
    this.asked.push(req);
    if (this.fail) throw new SpawnError(this.fail);
    const out = new PassThrough();
    const err = new PassThrough();
    let resolveExit!: (e: ProcessExit) => void;
    const exited = new Promise<ProcessExit>((r) => (resolveExit = r));
    const exit = (e: ProcessExit) => {
      out.end();
      err.end();
      setImmediate(() => resolveExit(e));
    };
    setImmediate(() => this.script({ out, err, exit }));
    return {
      pid: 42,
      stdin: new PassThrough(),
      stdout: out,
      stderr: err,
      exited,
      kill: () => {
        this.killed++;
        exit({ code: null, signal: 'SIGKILL' });
      },
    };
  }
}

describe('app/agent/ExecService', () => {
  it('decodes UTF-8 split across chunks in streamed frames', async () => {
    const euro = Buffer.from('€');
    const svc = new ExecService(
      new ScriptedRunner(({ out, exit }) => {
        out.write(euro.subarray(0, 1));
        setTimeout(() => {
          out.write(euro.subarray(1));
          exit({ code: 0, signal: null });
        }, 10);
      }),
    );
    const frames = [];
    for await (const f of svc.stream({ cmd: 'x', args: [] })) frames.push(f);
    expect(frames.map((f) => f.type)).to.deep.equal(['started', 'stdout', 'exit']);
    expect(frames[1].data).to.equal('€');
  });

  it('reports a command that cannot start as exit 127 (buffered and streamed)', async () => {
    const svc = new ExecService(new ScriptedRunner(() => undefined, 'cannot start x: ENOENT'));
    expect(await svc.buffered({ cmd: 'x', args: [] })).to.deep.equal({
      stdout: '',
      stderr: '',
      exit_code: 127,
      error: 'cannot start x: ENOENT',
    });
    const frames = [];
    for await (const f of svc.stream({ cmd: 'x', args: [] })) frames.push(f);
    expect(frames.map((f) => [f.type, f.exit_code])).to.deep.equal([
      ['error', undefined],
      ['exit', 127],
    ]);
  });

  it('kills at the timeout and reports -1; a signal death is 128+n', async () => {
    const runner = new ScriptedRunner(() => undefined);
    const svc = new ExecService(runner);
    const r = await svc.buffered({ cmd: 'x', args: [], timeoutMs: 20 });
    expect(r.exit_code).to.equal(-1);
    expect(r.error).to.match(/timed out/);
    expect(runner.killed).to.equal(1);
    const sig = new ExecService(new ScriptedRunner(({ exit }) => exit({ code: null, signal: 'SIGTERM' })));
    expect((await sig.buffered({ cmd: 'x', args: [] })).exit_code).to.equal(143);
  });

  it('cancel() kills a streamed command', async () => {
    const runner = new ScriptedRunner(({ out }) => out.write('tick\n'));
    const svc = new ExecService(runner);
    const it = svc.stream({ cmd: 'x', args: [] });
    for await (const f of it) {
      if (f.type === 'stdout') it.cancel();
    }
    expect(runner.killed).to.equal(1);
  });

  it("gives a command run as another uid that user's HOME, USER and LOGNAME; the request's env wins", async () => {
    const runner = new ScriptedRunner(({ exit }) => exit({ code: 0, signal: null }));
    const users = {
      find: async (u: string) =>
        u === '1000' ? { uid: 1000, gid: 1000, groups: [], home: '/home/svc', name: 'svc', shell: '/bin/bash' } : null,
    };
    const svc = new ExecService(runner, users);
    await svc.buffered({ cmd: 'x', args: [], uid: 1000 });
    expect(runner.asked[0].env).to.deep.equal({ HOME: '/home/svc', USER: 'svc', LOGNAME: 'svc', SHELL: '/bin/bash' });
    await svc.buffered({ cmd: 'x', args: [], uid: 1000, env: { HOME: '/tmp' } });
    expect(runner.asked[1].env).to.include({ HOME: '/tmp', USER: 'svc' });
    await svc.buffered({ cmd: 'x', args: [] });
    expect(runner.asked[2].env, 'as the agent runs').to.equal(undefined);
  });

  it('runs as a user by name or number: its ids, its home as the cwd, its login shell as SHELL', async () => {
    const runner = new ScriptedRunner(({ exit }) => exit({ code: 0, signal: null }));
    const passwd = [
      { uid: 1000, gid: 1001, groups: [1001, 27], home: '/home/svc', name: 'svc', shell: '/bin/bash' },
      { uid: 65534, gid: 65534, groups: [], home: '/nonexistent', name: 'nobody', shell: '/usr/sbin/nologin' },
    ];
    const users = { find: async (u: string) => passwd.find((p) => p.name === u || String(p.uid) === u) ?? null };
    const svc = new ExecService(runner, users);
    await svc.buffered({ cmd: 'x', args: [], user: 'svc' });
    expect(runner.asked[0]).to.deep.include({ uid: 1000, gid: 1001, home: '/home/svc' });
    expect(runner.asked[0].groups, 'its supplementary groups, as login sets them').to.deep.equal([1001, 27]);
    expect(runner.asked[0].env).to.deep.equal({ HOME: '/home/svc', USER: 'svc', LOGNAME: 'svc', SHELL: '/bin/bash' });
    await svc.buffered({ cmd: 'x', args: [], user: '1000', gid: 0, cwd: '/tmp' });
    expect(runner.asked[1], 'the request says where and which group').to.deep.include({
      uid: 1000,
      gid: 0,
      cwd: '/tmp',
    });
    // a uid alone takes its user's gid (it took the agent's, root's), and stays where the agent is
    await svc.buffered({ cmd: 'x', args: [], uid: 1000 });
    expect(runner.asked[2]).to.deep.include({ uid: 1000, gid: 1001, home: undefined });
    await svc.buffered({ cmd: 'x', args: [], user: 'nobody' });
    expect(runner.asked[3].env, 'nologin is no shell').to.deep.equal({
      HOME: '/nonexistent',
      USER: 'nobody',
      LOGNAME: 'nobody',
    });
  });

  it('reports a user the guest does not have as a command that cannot start (buffered and streamed)', async () => {
    const runner = new ScriptedRunner(({ exit }) => exit({ code: 0, signal: null }));
    const svc = new ExecService(runner, { find: async () => null });
    const r = await svc.buffered({ cmd: 'x', args: [], user: 'ghost' });
    expect(r).to.deep.include({ exit_code: 127, error: 'no user ghost in the guest' });
    const frames = [];
    for await (const f of svc.stream({ cmd: 'x', args: [], user: 'ghost' })) frames.push(f);
    expect(frames.at(-1)).to.deep.include({ type: 'exit', exit_code: 127, error: 'no user ghost in the guest' });
    expect(runner.asked, 'nothing ran').to.deep.equal([]);
    // an agent without the guest's users runs no command as a named user either
    const bare = await new ExecService(runner).buffered({ cmd: 'x', args: [], user: 'svc' });
    expect(bare).to.deep.include({ exit_code: 127, error: 'this agent cannot run a command as another user' });
  });
});
