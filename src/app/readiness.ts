import type { WaitMode } from '../domain/create-request.js';
import { DeadlineExceededError, InternalError } from '../domain/errors.js';
import type { CreatePhase } from '../domain/events.js';
import type { InstanceRecord } from '../domain/instance.js';
import type { Clock } from '../ports/clock.js';
import type { AgentEndpoint, GuestAgent } from '../ports/guest-agent.js';
import type { SshProbe } from '../ports/tunnels.js';

export interface ReadinessDeps {
  agent: GuestAgent;
  ssh: SshProbe;
  clock: Clock;
}

export interface WaitContext {
  record: InstanceRecord;
  mode: Exclude<WaitMode, 'auto'>;
  deadline: number;
  /** Reports a phase as it begins. */
  phase(phase: CreatePhase, message: string): void;
  /** Returns a reason when the VM process died, so waiting stops at once. */
  died(): string | undefined;
}

const POLL_MS = 50;

export function agentEndpoint(record: Pick<InstanceRecord, 'agent_port' | 'agent_cid'>): AgentEndpoint {
  return { host: '127.0.0.1', port: record.agent_port, cid: record.agent_cid || undefined };
}

/**
 * Waits until the guest is ready under `mode` (decisions.md, "Create"). Throws
 * DeadlineExceededError at the deadline and InternalError when the guest reports failure or dies.
 * Under user-mode networking the host side of a forward accepts before the guest listens, so every
 * probe has a short timeout of its own.
 */
export async function waitReady(deps: ReadinessDeps, ctx: WaitContext): Promise<void> {
  const { record } = ctx;
  const until = async <T>(what: string, probe: () => Promise<T | undefined>): Promise<T> => {
    for (;;) {
      const reason = ctx.died();
      if (reason) throw new InternalError(`vm ${record.name} stopped while waiting for ${what}: ${reason}`);
      const value = await probe().catch(() => undefined);
      if (value !== undefined) return value;
      if (deps.clock.now() + POLL_MS >= ctx.deadline) {
        throw new DeadlineExceededError(`vm ${record.name}: timed out waiting for ${what}`);
      }
      await deps.clock.sleep(POLL_MS);
    }
  };
  if (ctx.mode === 'ssh') {
    ctx.phase('wait_ssh', `waiting for ssh on 127.0.0.1:${record.ssh_port}`);
    await until('ssh', async () => ((await deps.ssh.ready('127.0.0.1', record.ssh_port, 1000)) ? true : undefined));
    return;
  }
  const ep = agentEndpoint(record);
  ctx.phase('wait_agent', `waiting for the guest agent on ${record.agent_cid ? `vsock ${record.agent_cid}` : `127.0.0.1:${record.agent_port}`}`);
  await until('the guest agent', () => deps.agent.health(ep, 500));
  if (ctx.mode === 'userdata') {
    ctx.phase('userdata', 'waiting for userdata to finish');
    await until('userdata', async () => ((await deps.agent.health(ep, 1000)).userdata_ran ? true : undefined));
  } else if (ctx.mode === 'bootstrap') {
    ctx.phase('bootstrap', 'waiting for the guest readiness state "ready"');
    await until('bootstrap', async () => {
      const r = await deps.agent.readiness(ep);
      if (r.state === 'failed') return { failed: r.error ?? r.message ?? 'bootstrap failed' };
      return r.state === 'ready' ? { failed: undefined } : undefined;
    }).then((r) => {
      if (r.failed) throw new InternalError(`vm ${record.name}: bootstrap failed: ${r.failed}`);
    });
  }
}
