import { inject, injectable, optional } from 'inversify';
import { InvalidArgumentError, NotSupportedError } from '../../domain/errors.js';
import { GuestUsers } from '../../ports/agent/kept-processes.js';
import { checkGuestUser, loginShell } from '../../domain/agent.js';
import { PtyFactory, type PtySession } from '../../ports/agent/pty.js';

/**
 * Opens a terminal for /shell with checked size and shell; with `user`, as that user of the guest
 * (by name or number): its uid and gid, its home as the working directory, its HOME, USER,
 * LOGNAME and SHELL, and its login shell unless one is asked for.
 */
@injectable()
export class ShellService {
  constructor(
    @inject(PtyFactory) private readonly pty: PtyFactory,
    @inject(GuestUsers) @optional() private readonly users?: GuestUsers,
  ) {}

  async open(q: { cols?: string; rows?: string; shell?: string; user?: string }): Promise<PtySession> {
    const dim = (v: string | undefined, def: number, what: string) => {
      if (v === undefined || v === '') return def;
      if (!/^\d+$/.test(v) || Number(v) < 1 || Number(v) > 1000)
        throw new InvalidArgumentError(`${what} must be an integer from 1 to 1000`);
      return Number(v);
    };
    const cols = dim(q.cols, 80, 'cols');
    const rows = dim(q.rows, 24, 'rows');
    if (q.shell && !q.shell.startsWith('/')) throw new InvalidArgumentError('shell must be an absolute path');
    if (!q.user) return this.pty.open({ shell: q.shell || this.pty.defaultShell(), cols, rows });
    checkGuestUser(q.user);
    if (!this.users) throw new NotSupportedError('this agent cannot open a shell as another user');
    const u = await this.users.find(q.user);
    if (!u) throw new InvalidArgumentError(`no user ${q.user} in the guest`);
    // a login shell that refuses a login (nologin, false) gives way to the default shell
    const shell = q.shell || loginShell(u.shell) || this.pty.defaultShell();
    return this.pty.open({
      shell,
      cols,
      rows,
      uid: u.uid,
      gid: u.gid,
      cwd: u.home,
      env: { HOME: u.home, USER: u.name, LOGNAME: u.name, SHELL: shell },
    });
  }
}
