import { join } from 'node:path';
import { injectable } from 'inversify';
import { InternalError } from '../../domain/errors.js';
import type { GuestIdentity } from '../../domain/agent.js';
import type { SystemIdentity } from '../../ports/agent/system-identity.js';
import { shellWord } from '../process-kit/shell-word.js';
import { KeptShell } from './kept-shell.js';

/**
 * Sets hostname (kernel and /etc/hostname), /etc/hosts, /etc/machine-id, the clock and a clone's
 * overlay address of a Linux guest, and records the identity in the notes directory: all of it one
 * command line to a shell the agent keeps (KeptShell), redirections and one `date`, no file written
 * by Node. A guest restored from a snapshot answers this call first, and under TCG each path it
 * takes for the first time costs (docs/suspend-and-clones.md).
 * `toolsDir` holds `date`, `ip`, `mkdir` and `sh` where the guest's own PATH may have none (images
 * made from container images carry busybox under /opt/svc/bin); otherwise they are looked up on
 * PATH. `root` is `/` but in tests.
 */
@injectable()
export class LinuxSystemIdentity implements SystemIdentity {
  private readonly shell: KeptShell;

  constructor(private readonly toolsDir?: string, private readonly root = '/', shell?: KeptShell) {
    this.shell = shell ?? new KeptShell(this.tool('sh'));
  }

  private tool(name: string): string {
    return this.toolsDir ? join(this.toolsDir, name) : name;
  }

  /** The command line that applies `id` and records it under `notes`; every word quoted. */
  line(id: GuestIdentity, notes: string): string {
    const q = shellWord;
    const at = (p: string) => q(join(this.root, p));
    const put = (text: string, file: string) => `printf '%s\\n' ${q(text)} > ${file}`;
    const note = (k: string, v: string) => put(v, q(join(notes, k)));
    const ip = (...args: string[]) => [q(this.tool('ip')), ...args.map(q)].join(' ');
    // Best effort, as before: a read-only /etc/hosts or machine-id does not fail the identity.
    const optional = [
      `${put(`127.0.0.1 localhost ${id.hostname}`, at('etc/hosts'))} 2>/dev/null`,
      ...(id.machine_id ? [`${put(id.machine_id, at('etc/machine-id'))} 2>/dev/null`] : []),
    ];
    const needed = [
      `{ [ -d ${q(notes)} ] || ${q(this.tool('mkdir'))} -p ${q(notes)}; }`,
      note('hostname', id.hostname), note('time_ms', String(id.time_ms)), ...(id.machine_id ? [note('machine_id', id.machine_id)] : []),
      `${q(this.tool('date'))} -u -s @${Math.floor(id.time_ms / 1000)} >/dev/null`,
      `printf '%s' ${q(id.hostname)} > ${at('proc/sys/kernel/hostname')}`,
      put(id.hostname, at('etc/hostname')),
      ...(id.overlay_ip ? [ip('addr', 'flush', 'dev', 'eth1'), ip('addr', 'add', id.overlay_ip, 'dev', 'eth1'), ip('link', 'set', 'eth1', 'up')] : []),
    ];
    return `${optional.join('; ')}; { ${needed.join(' && ')}; } 2>&1`;
  }

  async apply(id: GuestIdentity, notes: string): Promise<void> {
    if (!Number.isSafeInteger(Math.floor(id.time_ms / 1000)) || id.time_ms < 0) throw new InternalError(`cannot apply the identity: not a time: ${id.time_ms}`);
    let answer;
    try {
      answer = await this.shell.run(this.line(id, notes));
    } catch (err) {
      throw new InternalError(`cannot apply the identity: ${(err as Error).message}`);
    }
    if (answer.status !== 0) throw new InternalError(`cannot apply the identity: exit ${answer.status}: ${answer.said.join(' ').slice(0, 300)}`);
  }

  /** Ends the kept shell (the agent's shutdown, tests). */
  close(): void {
    this.shell.close();
  }
}
