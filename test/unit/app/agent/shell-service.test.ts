import { expect } from 'chai';
import { ShellService } from '../../../../src/app/agent/shell-service.js';
import type { GuestUser, GuestUsers } from '../../../../src/ports/agent/kept-processes.js';
import type { PtyFactory, PtyOptions, PtySession } from '../../../../src/ports/agent/pty.js';

class RecordingPty implements PtyFactory {
  readonly opened: PtyOptions[] = [];
  defaultShell(): string {
    return '/bin/sh';
  }
  open(opts: PtyOptions): PtySession {
    this.opened.push(opts);
    return { pid: 1, write() {}, resize() {}, onData() {}, onExit() {}, kill() {} };
  }
}

const users: Record<string, GuestUser> = {
  svc: { uid: 1000, gid: 1000, groups: [1000, 27], home: '/home/svc', name: 'svc', shell: '/bin/bash' },
  daemon: { uid: 1, gid: 1, groups: [1], home: '/usr/sbin', name: 'daemon', shell: '/usr/sbin/nologin' },
};
const guestUsers: GuestUsers = {
  find: async (u) => users[u] ?? Object.values(users).find((x) => String(x.uid) === u) ?? null,
};

describe('app/agent/ShellService', () => {
  it('opens a shell as root by default, and as a user of the guest with its ids, home, environment and login shell', async () => {
    const pty = new RecordingPty();
    const shells = new ShellService(pty, guestUsers);
    await shells.open({ cols: '100', rows: '30' });
    expect(pty.opened[0]).to.deep.equal({ shell: '/bin/sh', cols: 100, rows: 30 });
    await shells.open({ user: 'svc' });
    expect(pty.opened[1]).to.deep.equal({
      shell: '/bin/bash',
      cols: 80,
      rows: 24,
      uid: 1000,
      gid: 1000,
      groups: [1000, 27],
      home: '/home/svc',
      env: { HOME: '/home/svc', USER: 'svc', LOGNAME: 'svc', SHELL: '/bin/bash' },
    });
    await shells.open({ user: '1000', shell: '/bin/sh' });
    expect(pty.opened[2]).to.include({ shell: '/bin/sh', uid: 1000 });
    // A user whose login shell refuses logins gets the default shell.
    await shells.open({ user: 'daemon' });
    expect(pty.opened[3]).to.include({ shell: '/bin/sh', uid: 1 });
  });

  it('runs a command with its args in the terminal, in cwd with env; as a user, under its variables and in its home unless cwd', async () => {
    const pty = new RecordingPty();
    const shells = new ShellService(pty, guestUsers);
    await shells.open({ cmd: 'top', args: ['-d', '1'], cols: '120', cwd: '/tmp', env: ['A=1', 'B=x=y'] });
    expect(pty.opened[0]).to.deep.equal({
      shell: 'top',
      args: ['-d', '1'],
      cols: 120,
      rows: 24,
      cwd: '/tmp',
      env: { A: '1', B: 'x=y' },
    });
    await shells.open({ cmd: 'python3', user: 'svc', env: 'HOME=/srv' });
    expect(pty.opened[1]).to.deep.equal({
      shell: 'python3',
      args: [],
      cols: 80,
      rows: 24,
      uid: 1000,
      gid: 1000,
      groups: [1000, 27],
      home: '/home/svc',
      env: { HOME: '/srv', USER: 'svc', LOGNAME: 'svc', SHELL: '/bin/bash' },
    });
    await shells.open({ user: 'svc', cwd: '/var' });
    expect(pty.opened[2]).to.include({ shell: '/bin/bash', cwd: '/var' });
  });

  it('refuses an unknown user, a bad name, a relative shell, and a user where the agent knows none', async () => {
    const pty = new RecordingPty();
    const shells = new ShellService(pty, guestUsers);
    const refused = (q: Record<string, string | string[]>) =>
      shells.open(q).then(
        () => undefined,
        (e: Error) => e,
      );
    expect((await refused({ user: 'nobody-here' }))?.message).to.equal('no user nobody-here in the guest');
    expect((await refused({ user: '../x' }))?.message).to.match(/user must be a user name or number/);
    expect((await refused({ shell: 'bash' }))?.message).to.equal('shell must be an absolute path');
    expect((await refused({ shell: '/bin/sh', cmd: 'top' }))?.message).to.equal('give shell or cmd, not both');
    expect((await refused({ args: '-x' }))?.message).to.equal('args go with cmd');
    expect((await refused({ cmd: 'ls', cwd: 'tmp' }))?.message).to.equal('cwd must be an absolute path');
    expect((await refused({ cmd: 'ls', env: 'A' }))?.message).to.equal('env must be NAME=VALUE, got "A"');
    expect((await refused({ cols: '0' }))?.message).to.equal('cols must be an integer from 1 to 1000');
    expect(await new ShellService(pty).open({ user: 'svc' }).catch((e: Error) => e.message)).to.match(
      /cannot open a shell as another user/,
    );
    expect(pty.opened).to.deep.equal([]);
  });
});
