import type { Readable } from 'node:stream';
import { inject, injectable } from 'inversify';
import type { AgentHealth, CopyMode, ExecFrame, ExecRequest, ExecResult, FsInfo, GuestStats } from '../domain/agent.js';
import { AgentUnavailableError } from '../domain/errors.js';
import type { InstanceRecord } from '../domain/instance.js';
import { GuestAgent, type AgentEndpoint, type FsOp, type ShellOptions, type ShellSession, type UploadOptions } from '../ports/guest-agent.js';
import { Vms } from './vms.js';
import { agentEndpoint } from './readiness.js';

/**
 * The agent proxy use cases: find the VM (404), make sure its agent can be reached (503 when
 * the VM is not running), then hand the call to the GuestAgent port.
 */
@injectable()
export class GuestProxy {
  constructor(
    @inject(Vms) private readonly vms: Vms,
    @inject(GuestAgent) private readonly agent: GuestAgent,
  ) {}

  endpoint(name: string): AgentEndpoint {
    return GuestProxy.endpointOf(this.vms.get(name));
  }

  static endpointOf(rec: InstanceRecord): AgentEndpoint {
    if (rec.status !== 'running') {
      throw new AgentUnavailableError(`vm ${rec.name} is ${rec.status}; its agent answers only while it is running`);
    }
    if (!rec.agent_port && !rec.agent_cid) throw new AgentUnavailableError(`vm ${rec.name} has no agent endpoint`);
    return agentEndpoint(rec);
  }

  health(name: string): Promise<AgentHealth> {
    return this.agent.health(this.endpoint(name), 3000);
  }

  stats(name: string): Promise<GuestStats> {
    return this.agent.stats(this.endpoint(name));
  }

  exec(name: string, req: ExecRequest, stdin?: Readable): Promise<ExecResult> {
    return this.agent.exec(this.endpoint(name), req, stdin);
  }

  execStream(name: string, req: ExecRequest, stdin?: Readable): AsyncIterable<ExecFrame> {
    return this.agent.execStream(this.endpoint(name), req, stdin);
  }

  upload(name: string, opts: UploadOptions, body: Readable): Promise<void> {
    return this.agent.upload(this.endpoint(name), opts, body);
  }

  download(name: string, path: string, mode: CopyMode): Promise<{ contentType: string; body: Readable; size?: number }> {
    return this.agent.download(this.endpoint(name), path, mode);
  }

  fs(name: string, op: FsOp): Promise<FsInfo | FsInfo[] | void> {
    return this.agent.fs(this.endpoint(name), op);
  }

  shell(name: string, opts: ShellOptions): Promise<ShellSession> {
    return this.agent.shell(this.endpoint(name), opts);
  }
}
