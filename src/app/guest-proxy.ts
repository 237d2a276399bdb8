import type { Duplex, Readable } from 'node:stream';
import { inject, injectable } from 'inversify';
import type { AgentHealth, CopyMode, ExecFrame, ExecRequest, ExecResult, FsInfo, GuestStats } from '../domain/agent.js';
import { AgentUnavailableError } from '../domain/errors.js';
import type { VmRecord } from '../domain/vm.js';
import {
  GuestAgent,
  type AgentEndpoint,
  type FsOp,
  type ShellOptions,
  type UploadOptions,
} from '../ports/guest-agent.js';
import { CallGate } from './call-gate.js';
import type { Config } from './config.js';
import { agentEndpoint } from './readiness.js';
import { AppConfig } from './tokens.js';
import { Vms } from './vms.js';
import type { Terminal } from '../ports/terminal.js';

/**
 * The agent proxy use cases: find the VM (404), make sure its agent can be reached (503 when
 * the VM is not running), then hand the call to the GuestAgent port. Execs and shells, which may
 * run for ever, count against max_execs_per_vm and max_execs_total (429 past them).
 */
/** What brings a VM in each state back to running, as the error says it. */
const BRING_BACK: Partial<Record<VmRecord['status'], (n: string) => string>> = {
  suspended: (n) => `: restore it first (svc restore ${n}, POST /vms/${n}/restore)`,
  paused: (n) => `: resume it first (svc resume ${n}, POST /vms/${n}/resume)`,
  stopped: (n) => `: start it first (svc start ${n}, POST /vms/${n}/start)`,
  creating: () => ': wait until its create is ready',
  error: (n) => `: see why with svc logs ${n}, then start or delete it`,
};

@injectable()
export class GuestProxy {
  readonly gate: CallGate;

  constructor(
    @inject(Vms) private readonly vms: Vms,
    @inject(GuestAgent) private readonly agent: GuestAgent,
    @inject(AppConfig) config: Config,
  ) {
    this.gate = new CallGate(config.max_execs_per_vm, config.max_execs_total);
  }

  endpoint(name: string): AgentEndpoint {
    return GuestProxy.endpointOf(this.vms.get(name));
  }

  static endpointOf(rec: VmRecord): AgentEndpoint {
    if (rec.status !== 'running') {
      throw new AgentUnavailableError(
        `vm ${rec.name} is ${rec.status}; its agent answers only while it runs${BRING_BACK[rec.status]?.(rec.name) ?? ''}`,
      );
    }
    if (!rec.agent_port && !rec.agent_cid) throw new AgentUnavailableError(`vm ${rec.name} has no agent endpoint`);
    if (rec.agent_missing) {
      throw new AgentUnavailableError(
        `vm ${rec.name} runs image ${rec.image}, which has no svc agent yet: deploy it with POST /vms/${rec.name}/agent/deploy (svc agent deploy ${rec.name})`,
      );
    }
    return agentEndpoint(rec);
  }

  health(name: string): Promise<AgentHealth> {
    return this.agent.health(this.endpoint(name), 3000);
  }

  stats(name: string): Promise<GuestStats> {
    return this.agent.stats(this.endpoint(name));
  }

  /** `signal` is the caller leaving: the command is killed in the guest. */
  async exec(name: string, req: ExecRequest, stdin?: Readable, signal?: AbortSignal): Promise<ExecResult> {
    const ep = this.endpoint(name);
    const leave = this.gate.enter(name);
    try {
      return await this.agent.exec(ep, req, stdin, signal);
    } finally {
      leave();
    }
  }

  execStream(name: string, req: ExecRequest, stdin?: Readable, signal?: AbortSignal): AsyncIterable<ExecFrame> {
    const ep = this.endpoint(name);
    const leave = this.gate.enter(name);
    const frames = this.agent.execStream(ep, req, stdin, signal);
    return (async function* () {
      try {
        yield* frames;
      } finally {
        leave();
      }
    })();
  }

  upload(name: string, opts: UploadOptions, body: Readable): Promise<void> {
    return this.agent.upload(this.endpoint(name), opts, body);
  }

  download(
    name: string,
    path: string,
    mode: CopyMode,
  ): Promise<{ contentType: string; body: Readable; size?: number }> {
    return this.agent.download(this.endpoint(name), path, mode);
  }

  fs(name: string, op: FsOp): Promise<FsInfo | FsInfo[] | void> {
    return this.agent.fs(this.endpoint(name), op);
  }

  /** A stream to a TCP port on the guest's loopback (GuestAgent.openPort); the VM must be running. */
  openPort(name: string, port: number): Promise<Duplex> {
    return this.agent.openPort(this.endpoint(name), port);
  }

  async shell(name: string, opts: ShellOptions): Promise<Terminal> {
    const ep = this.endpoint(name);
    const leave = this.gate.enter(name);
    try {
      const s = await this.agent.shell(ep, opts);
      s.onExit(leave);
      return {
        write: (d) => s.write(d),
        resize: (c, r) => s.resize(c, r),
        onData: (l) => s.onData(l),
        onExit: (l) => s.onExit(l),
        close: () => {
          leave();
          s.close();
        },
      };
    } catch (err) {
      leave();
      throw err;
    }
  }
}
