import { inject, injectable } from 'inversify';
import { InvalidArgumentError } from '../../domain/errors.js';
import { PtyFactory, type PtySession } from '../../ports/agent/pty.js';

/** Opens a terminal for /shell with checked size and shell. */
@injectable()
export class ShellService {
  constructor(@inject(PtyFactory) private readonly pty: PtyFactory) {}

  open(q: { cols?: string; rows?: string; shell?: string }): PtySession {
    const dim = (v: string | undefined, def: number, what: string) => {
      if (v === undefined || v === '') return def;
      if (!/^\d+$/.test(v) || Number(v) < 1 || Number(v) > 1000)
        throw new InvalidArgumentError(`${what} must be an integer from 1 to 1000`);
      return Number(v);
    };
    const shell = q.shell || this.pty.defaultShell();
    if (!shell.startsWith('/')) throw new InvalidArgumentError('shell must be an absolute path');
    return this.pty.open({ shell, cols: dim(q.cols, 80, 'cols'), rows: dim(q.rows, 24, 'rows') });
  }
}
