import { AgentUnavailableError, NotSupportedError } from '../../../domain/errors.js';
import type {
  AgentHealth,
  ExecFrame,
  ExecResult,
  FsInfo,
  GuestEgress,
  GuestIdentity,
  GuestStats,
  Readiness,
} from '../../../domain/agent.js';
import type { AgentEndpoint, GuestAgent } from '../../../ports/guest-agent.js';
import type { FakeGuests } from './fake-guests.js';
import type { Terminal } from '../../../ports/terminal.js';
import type { Duplex } from 'node:stream';

const NO_GUEST =
  'the fake hypervisor has no guest to run this in; set fake_agent: true to run a local svc-agent per VM';

/**
 * The guest side of InMemoryHypervisor when no real agent runs: health and readiness answer as a
 * booted guest would, so every wait mode works; guest operations are NotSupported.
 */
export class InMemoryGuestAgent implements GuestAgent {
  private readonly started = Date.now();

  constructor(private readonly hv: FakeGuests) {}

  private vm(ep: AgentEndpoint): string {
    const name = this.hv.vmByPort(ep.port);
    if (!name || !this.hv.guestUp(name)) throw new AgentUnavailableError(`no agent answers on 127.0.0.1:${ep.port}`);
    return name;
  }

  async health(ep: AgentEndpoint): Promise<AgentHealth> {
    const hostname = this.vm(ep);
    return {
      hostname,
      agent_version: 'fake',
      agent_uptime_sec: Math.floor((Date.now() - this.started) / 1000),
      userdata_ran: true,
      readiness: { state: 'ready' },
    };
  }

  async readiness(ep: AgentEndpoint): Promise<Readiness> {
    this.vm(ep);
    return { state: 'ready' };
  }

  async stats(ep: AgentEndpoint): Promise<GuestStats> {
    this.vm(ep);
    return {
      uptime_sec: 1,
      load1: 0,
      load5: 0,
      load15: 0,
      cpus: 1,
      mem_total_bytes: 512 << 20,
      mem_available_bytes: 256 << 20,
    };
  }

  async exec(): Promise<ExecResult> {
    throw new NotSupportedError(NO_GUEST);
  }

  async *execStream(): AsyncIterable<ExecFrame> {
    throw new NotSupportedError(NO_GUEST);
  }

  async upload(): Promise<void> {
    throw new NotSupportedError(NO_GUEST);
  }

  async download(): Promise<never> {
    throw new NotSupportedError(NO_GUEST);
  }

  async fs(): Promise<FsInfo> {
    throw new NotSupportedError(NO_GUEST);
  }

  async materialize(): Promise<never> {
    throw new NotSupportedError(NO_GUEST);
  }

  /** The identities each VM was given, last one last (tests). */
  readonly identities = new Map<string, GuestIdentity[]>();

  async setIdentity(ep: AgentEndpoint, id: GuestIdentity): Promise<void> {
    const name = this.vm(ep);
    this.identities.set(name, [...(this.identities.get(name) ?? []), id]);
  }

  /** The egress each VM was given, last one last (tests). */
  readonly egress = new Map<string, GuestEgress[]>();

  async setEgress(ep: AgentEndpoint, egress: GuestEgress): Promise<void> {
    const name = this.vm(ep);
    this.egress.set(name, [...(this.egress.get(name) ?? []), egress]);
  }

  async shell(): Promise<Terminal> {
    throw new NotSupportedError(NO_GUEST);
  }

  async openPort(): Promise<Duplex> {
    throw new NotSupportedError(NO_GUEST);
  }

  close(): void {}
}
