import { inject, injectable, optional } from 'inversify';
import { InvalidArgumentError, NotSupportedError } from '../../domain/errors.js';
import { GuestUsers } from '../../ports/agent/kept-processes.js';
import { PtyFactory, type PtySession } from '../../ports/agent/pty.js';

/** Login shells that refuse a login: a user with one of these gets the default shell instead. */
const NO_LOGIN = /\/(nologin|false)$/;

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
    if (!/^[a-z_][a-z0-9_.-]{0,31}\$?$|^\d{1,10}$/i.test(q.user))
      throw new InvalidArgumentError(`user must be a user name or number, got ${JSON.stringify(q.user.slice(0, 40))}`);
    if (!this.users) throw new NotSupportedError('this agent cannot open a shell as another user');
    const u = await this.users.find(q.user);
    if (!u) throw new InvalidArgumentError(`no user ${q.user} in the guest`);
    const own = u.shell.startsWith('/') && !NO_LOGIN.test(u.shell) ? u.shell : undefined;
    const shell = q.shell || own || this.pty.defaultShell();
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
