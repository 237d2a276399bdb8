import { inject, injectable } from 'inversify';
import { AgentUnavailableError, InternalError } from '../domain/errors.js';
import { Clock } from '../ports/clock.js';
import { GuestAgent } from '../ports/guest-agent.js';
import { Hypervisor } from '../ports/hypervisor.js';
import { ActivityLog } from '../ports/stores.js';
import { AgentArtifact, RemoteShell } from '../ports/tunnels.js';
import { GuestService } from './guest-service.js';
import { InstanceService } from './instance-service.js';

/** Shell-quotes one word for sh. */
export function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * POST /vms/{name}/agent/deploy: uploads the built agent over SSH into `<root>/opt/svc/agent`
 * (swapped in whole), stops the running agent through its pidfile so the guest's supervisor
 * starts the new one, and waits until it answers health.
 */
@injectable()
export class AgentDeployService {
  constructor(
    @inject(InstanceService) private readonly instances: InstanceService,
    @inject(GuestAgent) private readonly agent: GuestAgent,
    @inject(RemoteShell) private readonly remote: RemoteShell,
    @inject(AgentArtifact) private readonly artifact: AgentArtifact,
    @inject(Hypervisor) private readonly hv: Hypervisor,
    @inject(ActivityLog) private readonly activity: ActivityLog,
    @inject(Clock) private readonly clock: Clock,
  ) {}

  async deploy(name: string): Promise<{ name: string; agent_version: string }> {
    const t0 = this.clock.now();
    return this.instances.withLock(name, async (rec) => {
      const ep = GuestService.endpointOf(rec);
      const image = await this.hv.resolveImage(rec.image);
      const target = { host: '127.0.0.1', port: rec.ssh_port, user: image.ssh_user };
      // The record keeps the hypervisor's VmHandle; its adapter data may name a guest root prefix
      // (the fake's stand-in guests live in a directory; real guests have '').
      const adapterData = (rec.runtime as { runtime?: { guest_root?: unknown } } | undefined)?.runtime;
      const root = typeof adapterData?.guest_root === 'string' ? adapterData.guest_root : '';
      const dir = `${root}/opt/svc`;
      const version = await this.artifact.version();
      const install = [
        `set -e`, `mkdir -p ${shq(dir)}`, `rm -rf ${shq(`${dir}/agent.new`)} ${shq(`${dir}/agent.old`)}`,
        `mkdir ${shq(`${dir}/agent.new`)}`, `tar -x -C ${shq(`${dir}/agent.new`)}`,
        `if [ -d ${shq(`${dir}/agent`)} ]; then mv ${shq(`${dir}/agent`)} ${shq(`${dir}/agent.old`)}; fi`,
        `mv ${shq(`${dir}/agent.new`)} ${shq(`${dir}/agent`)}`, `rm -rf ${shq(`${dir}/agent.old`)}`,
      ].join('; ');
      const up = await this.remote.exec(target, install, await this.artifact.tar());
      if (up.code !== 0) throw new InternalError(`agent upload failed (exit ${up.code}): ${up.stderr.trim()}`);
      const before = await this.agent.health(ep, 2000).catch(() => undefined);
      const pidfile = `${root}/run/svc/agent.pid`;
      const restart = await this.remote.exec(target, `if [ -f ${shq(pidfile)} ]; then kill "$(cat ${shq(pidfile)})" 2>/dev/null || true; fi`);
      if (restart.code !== 0) throw new InternalError(`agent restart failed: ${restart.stderr.trim()}`);
      const deadline = this.clock.now() + 30_000;
      for (;;) {
        const h = await this.agent.health(ep, 1000).catch(() => undefined);
        // A new process: version matches and its uptime restarted.
        if (h && h.agent_version === version && (!before || h.agent_uptime_sec < before.agent_uptime_sec + (this.clock.now() - t0) / 1000 - 0.5)) {
          this.activity.record({ action: 'agent.deploy', target: name, status: 'ok', duration_ms: this.clock.now() - t0 });
          return { name, agent_version: h.agent_version };
        }
        if (this.clock.now() > deadline) throw new AgentUnavailableError(`vm ${name}: the new agent did not answer within 30 s`);
        await this.clock.sleep(200);
      }
    });
  }
}
