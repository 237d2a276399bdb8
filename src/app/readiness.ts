import type { WaitMode } from '../domain/create-request.js';
import { AgentUnavailableError, DeadlineExceededError, InternalError } from '../domain/errors.js';
import type { CreatePhase } from '../domain/events.js';
import type { VmRecord } from '../domain/vm.js';
import type { Clock } from '../ports/clock.js';
import type { AgentEndpoint, GuestAgent } from '../ports/guest-agent.js';
import type { RemoteShell, SshProbe } from '../ports/tunnels.js';

export interface ReadinessDeps {
  agent: GuestAgent;
  ssh: SshProbe;
  remote: RemoteShell;
  clock: Clock;
}

export interface WaitContext {
  record: VmRecord;
  mode: Exclude<WaitMode, 'auto'>;
  deadline: number;
  /** Reports a phase as it begins. */
  phase(phase: CreatePhase, message: string): void;
  /** Returns a reason when the VM process died, so waiting stops at once. */
  died(): string | undefined;
  /** For an image without an agent: the user the daemon logs in as; `userdata` then asks cloud-init over SSH. */
  sshUser?: string;
  /**
   * Stands in for the health probe of a guest that is already running its agent (restored from a
   * snapshot): the first call is the one that has to be made anyway (its identity), repeated while
   * the agent cannot be reached; any other failure ends the wait with it. Under TCG every first
   * call after a restore is slow (the code is translated again), so one call beats two.
   */
  firstCall?: () => Promise<void>;
}

const CLOUD_INIT_POLL_MS = 1000;
/** One poll over SSH: its time and its answer's size (a result file of a few hundred bytes when honest). */
const CLOUD_INIT_EXEC_MS = 30_000;
const CLOUD_INIT_RESULT_MAX = 16 * 1024;
const CLOUD_INIT_MAX = CLOUD_INIT_RESULT_MAX + 1024;
/**
 * The poll, a shell test and nothing else: cloud-init writes /run/cloud-init/result.json (`{"v1":
 * {"datasource", "errors": [...]}}`, every stage's errors) when its last stage ends, and that file is
 * what its own `status` reads for done or error. Reading the file, not running `cloud-init status`,
 * spares the guest a Python start (4-10 s of its one vCPU under TCG) at the moment it is done. A
 * guest whose cloud-init is disabled, or that has none, says so at once.
 */
export const CLOUD_INIT_POLL = [
  'if [ -e /run/cloud-init/result.json ]; then echo "result:"; head -c ' +
    CLOUD_INIT_RESULT_MAX +
    ' /run/cloud-init/result.json',
  'elif ! command -v cloud-init >/dev/null 2>&1; then echo "cloud-init: not found"',
  'elif [ -e /run/cloud-init/disabled ] || [ -e /etc/cloud/cloud-init.disabled ]; then echo "status: disabled"',
  'else echo "status: running"; fi',
].join('; ');

/** The poll's answer: done, failed (with cloud-init's errors), or still going. */
export function cloudInitState(out: string): { done: true } | { failed: string } | undefined {
  const marker = /(?:^|\n)result:\n/.exec(out);
  if (marker) {
    const text = out.slice(marker.index + marker[0].length);
    let errors: unknown;
    try {
      errors = (JSON.parse(text) as { v1?: { errors?: unknown } }).v1?.errors;
    } catch {
      return { failed: `cloud-init's result file is not JSON: ${text.slice(0, 200)}` };
    }
    if (!Array.isArray(errors)) return { failed: `cloud-init's result file has no errors list: ${text.slice(0, 200)}` };
    if (errors.length === 0) return { done: true };
    return { failed: `cloud-init reports error: ${errors.map(String).join(' ').slice(0, 500)}` };
  }
  if (/^status: disabled/m.test(out)) return { failed: 'cloud-init is disabled in the guest (wait=userdata needs it)' };
  if (/^cloud-init: not found/m.test(out))
    return { failed: 'the guest has no cloud-init to wait for (wait=userdata needs it)' };
  return undefined;
}

const POLL_MS = 50;

export function agentEndpoint(record: Pick<VmRecord, 'agent_port' | 'agent_cid' | 'agent_socket'>): AgentEndpoint {
  return {
    host: '127.0.0.1',
    port: record.agent_port,
    cid: record.agent_cid || undefined,
    ...(record.agent_socket ? { socket: record.agent_socket } : {}),
  };
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
  if (ctx.mode === 'userdata' && ctx.sshUser !== undefined) {
    const target = { host: '127.0.0.1', port: record.ssh_port, user: ctx.sshUser };
    ctx.phase('wait_ssh', `waiting for ssh on 127.0.0.1:${record.ssh_port}`);
    await until('ssh', async () => ((await deps.ssh.ready('127.0.0.1', record.ssh_port, 1000)) ? true : undefined));
    ctx.phase('userdata', 'waiting for cloud-init to finish the user-data');
    const r = await until('cloud-init', async () => {
      // Before cloud-init has installed the daemon's key the login is refused: keep asking.
      // Bounded by the create's deadline and a poll of its own: a guest that stalls the answer or
      // floods it fails this poll (and the connection is dropped), not the daemon.
      const timeoutMs = Math.max(1000, Math.min(CLOUD_INIT_EXEC_MS, ctx.deadline - deps.clock.now()));
      const out = await deps.remote
        .exec(target, CLOUD_INIT_POLL, { timeoutMs, maxOutputBytes: CLOUD_INIT_MAX })
        .catch(() => undefined);
      const state = out ? cloudInitState(out.stdout) : undefined;
      if (!state) await deps.clock.sleep(CLOUD_INIT_POLL_MS);
      return state;
    });
    if ('failed' in r) throw new InternalError(`vm ${record.name}: user-data failed: ${r.failed}`);
    return;
  }
  const ep = agentEndpoint(record);
  ctx.phase(
    'wait_agent',
    `waiting for the guest agent on ${record.agent_cid ? `vsock ${record.agent_cid}` : `127.0.0.1:${record.agent_port}`}`,
  );
  const first = ctx.firstCall;
  const reached = await until(
    'the guest agent',
    first
      ? async () =>
          first().then(
            () => ({ ok: true as const }),
            (err: unknown) => (err instanceof AgentUnavailableError ? undefined : { err }),
          )
      : async () => {
          await deps.agent.health(ep, 500);
          return { ok: true as const };
        },
  );
  if ('err' in reached) throw reached.err;
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
