import { inject, injectable } from 'inversify';
import { AgentUnavailableError } from '../domain/errors.js';
import { Clock } from '../ports/clock.js';
import { GuestAgent } from '../ports/guest-agent.js';
import { GuestImages } from '../ports/guest-images.js';
import { AgentArtifact, AgentInstaller } from '../ports/tunnels.js';
import { Activity } from './activity.js';
import { GuestProxy } from './guest-proxy.js';
import { Vms } from './vms.js';

const NEW_AGENT_WAIT_MS = 60_000;

/**
 * POST /vms/{name}/agent/deploy: installs the built agent over SSH (with its own node when the
 * guest has none), restarts it, and waits until the new one answers health (same version, and an
 * uptime that started over). On a guest without an agent (an imported cloud disk) this is what
 * makes the agent routes work; the service it installs brings the agent back after a reboot.
 */
@injectable()
export class AgentDeployService {
  constructor(
    @inject(Vms) private readonly vms: Vms,
    @inject(GuestAgent) private readonly agent: GuestAgent,
    @inject(AgentInstaller) private readonly installer: AgentInstaller,
    @inject(AgentArtifact) private readonly artifact: AgentArtifact,
    @inject(GuestImages) private readonly images: GuestImages,
    @inject(Activity) private readonly activity: Activity,
    @inject(Clock) private readonly clock: Clock,
  ) {}

  async deploy(name: string): Promise<{ name: string; agent_version: string }> {
    return this.vms.withVm(name, (rec, signal) =>
      this.activity.timed('agent.deploy', name, async () => {
        const t0 = this.clock.now();
        const ep = GuestProxy.endpointOf({ ...rec, agent_missing: false });
        const image = await this.images.resolveImage(rec.image);
        const target = { host: '127.0.0.1', port: rec.ssh_port, user: image.ssh_user };
        const version = await this.artifact.version();
        const guest = await this.installer.probe(target, signal);
        await this.installer.install(target, await this.artifact.tar({ executable: !guest.node }), signal);
        const before = await this.agent.health(ep, 2000).catch(() => undefined);
        await this.installer.restart(target, signal);
        const deadline = this.clock.now() + NEW_AGENT_WAIT_MS;
        for (;;) {
          const h = await this.agent.health(ep, 1000).catch(() => undefined);
          // A new process: version matches and its uptime restarted.
          if (
            h &&
            h.agent_version === version &&
            (!before || h.agent_uptime_sec < before.agent_uptime_sec + (this.clock.now() - t0) / 1000 - 0.5)
          ) {
            if (rec.agent_missing) {
              delete rec.agent_missing;
              await this.vms.save(rec);
            }
            return { name, agent_version: h.agent_version };
          }
          if (signal.aborted) throw new AgentUnavailableError(`vm ${name}: the agent deploy was given up`);
          if (this.clock.now() > deadline)
            throw new AgentUnavailableError(
              `vm ${name}: the new agent did not answer within ${NEW_AGENT_WAIT_MS / 1000} s`,
            );
          await this.clock.sleep(200);
        }
      }),
    );
  }
}
