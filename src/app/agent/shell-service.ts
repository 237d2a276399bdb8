import { inject, injectable, optional } from 'inversify';
import { InvalidArgumentError, NotSupportedError } from '../../domain/errors.js';
import { GuestUsers, type GuestUser } from '../../ports/agent/kept-processes.js';
import { loginShell } from '../../domain/agent.js';
import { parseShellQuery, type Query } from '../../domain/query.js';
import { PtyFactory, type PtySession } from '../../ports/agent/pty.js';

/**
 * Opens a terminal for /shell with checked size and shell, or a command in it (`cmd`, `args`);
 * with `user`, as that user of the guest (by name or number): its uid and gid, its home as the
 * working directory unless `cwd`, its HOME, USER, LOGNAME and SHELL (under the request's `env`),
 * and its login shell unless one is asked for.
 */
@injectable()
export class ShellService {
  constructor(
    @inject(PtyFactory) private readonly pty: PtyFactory,
    @inject(GuestUsers) @optional() private readonly users?: GuestUsers,
  ) {}

  /** The shell query (parseShellQuery's), checked; a command's name is found by the terminal's factory. */
  async open(q: Query): Promise<PtySession> {
    const t = parseShellQuery(q);
    const u = t.user === undefined ? undefined : await this.user(t.user);
    // a login shell that refuses a login (nologin, false) gives way to the default shell
    const shell = t.shell || (u && loginShell(u.shell)) || this.pty.defaultShell();
    const env = u ? { HOME: u.home, USER: u.name, LOGNAME: u.name, SHELL: shell, ...t.env } : t.env;
    return this.pty.open({
      ...(t.cmd ? { shell: t.cmd, args: t.args ?? [] } : { shell }),
      cols: t.cols ?? 80,
      rows: t.rows ?? 24,
      ...(u ? { uid: u.uid, gid: u.gid, groups: u.groups, home: u.home } : {}),
      ...(t.cwd ? { cwd: t.cwd } : {}),
      ...(env ? { env } : {}),
    });
  }

  private async user(name: string): Promise<GuestUser> {
    if (!this.users) throw new NotSupportedError('this agent cannot open a shell as another user');
    const u = await this.users.find(name);
    if (!u) throw new InvalidArgumentError(`no user ${name} in the guest`);
    return u;
  }
}
