import { inject, injectable } from 'inversify';
import { parsePortForward } from '../domain/create-request.js';
import {
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
  NotSupportedError,
  errorMessage,
} from '../domain/errors.js';
import type { Forward, VmRecord } from '../domain/vm.js';
import { GuestImages } from '../ports/guest-images.js';
import { Logger } from '../ports/logger.js';
import { Tunnels, type SshTarget } from '../ports/tunnels.js';
import { Activity } from './activity.js';
import type { LifecycleContribution } from './lifecycle-events.js';
import { Vms } from './vms.js';

/**
 * Live forwards: SSH tunnels from 127.0.0.1:host_port to a guest port. They are part of the
 * VM record, closed when the VM goes down, and re-opened (same host ports) when it is up
 * again: after start, restore, and a daemon restart that re-attached to it.
 */
@injectable()
export class ForwardService implements LifecycleContribution {
  constructor(
    @inject(Vms) private readonly vms: Vms,
    @inject(Tunnels) private readonly tunnels: Tunnels,
    @inject(GuestImages) private readonly images: GuestImages,
    @inject(Activity) private readonly activity: Activity,
    @inject(Logger) private readonly log: Logger,
  ) {}

  onUp(rec: VmRecord): Promise<void> {
    return this.reopen(rec);
  }

  onDown(rec: VmRecord): Promise<void> {
    return this.closeAll(rec);
  }

  onRemoved(rec: VmRecord): Promise<void> {
    return this.closeAll(rec);
  }

  async add(name: string, body: unknown): Promise<Forward> {
    const f = parsePortForward(body, 'forward');
    if (f.proto !== 'tcp')
      throw new InvalidArgumentError('live forwards carry tcp only; give udp forwards at create time');
    return this.vms.withVm(name, (rec) =>
      this.activity.timed(
        'forward.add',
        name,
        async () => {
          if (rec.status !== 'running')
            throw new InvalidStateError(`vm ${name} is ${rec.status}; live forwards need a running vm`);
          if (!rec.ssh_port)
            throw new NotSupportedError(
              `vm ${name} has no network device (its hypervisor driver gives it none), so no live forwards`,
            );
          if (f.host_port && rec.forwards.some((x) => x.host_port === f.host_port && x.proto === 'tcp')) {
            throw new InvalidArgumentError(`host port ${f.host_port} is already forwarded for vm ${name}`);
          }
          const fwd = await this.tunnels.open(name, await this.target(rec), f.host_port, f.guest_port);
          rec.forwards.push(fwd);
          await this.vms.save(rec);
          return fwd;
        },
        { targetOf: (fwd) => `${name}:${fwd.host_port}` },
      ),
    );
  }

  async remove(name: string, hostPortRaw: string): Promise<{ message: string; name: string; host_port: number }> {
    if (!/^\d{1,5}$/.test(hostPortRaw))
      throw new InvalidArgumentError(`invalid host port ${JSON.stringify(hostPortRaw)}`);
    const hostPort = Number(hostPortRaw);
    return this.vms.withVm(name, (rec) =>
      this.activity.timed('forward.remove', `${name}:${hostPort}`, async () => {
        const i = rec.forwards.findIndex((f) => f.kind === 'live' && f.host_port === hostPort);
        if (i < 0) throw new NotFoundError(`vm ${name} has no live forward on host port ${hostPort}`);
        await this.tunnels.close(name, hostPort);
        rec.forwards.splice(i, 1);
        await this.vms.save(rec);
        return { message: `forward ${hostPort} of vm ${name} closed`, name, host_port: hostPort };
      }),
    );
  }

  private async target(rec: VmRecord): Promise<SshTarget> {
    const image = await this.images.resolveImage(rec.image);
    return { host: '127.0.0.1', port: rec.ssh_port, user: image.ssh_user };
  }

  /** Re-opens the record's live forwards on their host ports; a failure is logged, not fatal. */
  private async reopen(rec: VmRecord): Promise<void> {
    const live = rec.forwards.filter((f) => f.kind === 'live');
    if (live.length === 0) return;
    const target = await this.target(rec);
    for (const f of live) {
      try {
        const info = await this.tunnels.open(rec.name, target, f.host_port, f.guest_port);
        f.pid = info.pid;
      } catch (err) {
        delete f.pid;
        this.log.error(
          { vm: rec.name, host_port: f.host_port, err: errorMessage(err) },
          'could not re-open live forward',
        );
      }
    }
    await this.vms.save(rec).catch(() => undefined);
  }

  private async closeAll(rec: VmRecord): Promise<void> {
    await this.tunnels.closeAll(rec.name);
    for (const f of rec.forwards) if (f.kind === 'live') delete f.pid;
  }
}
