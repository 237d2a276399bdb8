import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { injectable } from 'inversify';
import { InternalError } from '../../domain/errors.js';
import type { GuestIdentity } from '../../domain/agent.js';
import type { SystemIdentity } from '../../ports/agent/system-identity.js';
import { ShellClock } from './shell-clock.js';

const run = promisify(execFile);

/**
 * Sets hostname (kernel and /etc/hostname), /etc/machine-id and the clock (through a kept shell,
 * see ShellClock) of a Linux guest.
 * `toolsDir` holds `date`, `ip` and `sh` where the guest's own PATH may have none (images made from
 * container images carry busybox under /opt/svc/bin); otherwise they are looked up on PATH.
 */
@injectable()
export class LinuxSystemIdentity implements SystemIdentity {
  private readonly clock: ShellClock;

  constructor(private readonly toolsDir?: string) {
    this.clock = new ShellClock(this.tool('sh'), this.tool('date'));
  }

  private tool(name: string): string {
    return this.toolsDir ? join(this.toolsDir, name) : name;
  }

  async apply(id: GuestIdentity): Promise<void> {
    try {
      // All at once: a guest just restored from a snapshot runs every path slowly the first time.
      await Promise.all([
        this.clock.set(Math.floor(id.time_ms / 1000)),
        writeFile('/proc/sys/kernel/hostname', id.hostname),
        writeFile('/etc/hostname', `${id.hostname}\n`),
        writeFile('/etc/hosts', `127.0.0.1 localhost ${id.hostname}\n`).catch(() => undefined),
        id.machine_id ? writeFile('/etc/machine-id', `${id.machine_id}\n`).catch(() => undefined) : undefined,
      ]);
      if (id.overlay_ip) {
        await run(this.tool('ip'), ['addr', 'flush', 'dev', 'eth1']);
        await run(this.tool('ip'), ['addr', 'add', id.overlay_ip, 'dev', 'eth1']);
        await run(this.tool('ip'), ['link', 'set', 'eth1', 'up']);
      }
    } catch (err) {
      throw new InternalError(`cannot apply the identity: ${(err as Error).message}`);
    }
  }
}
