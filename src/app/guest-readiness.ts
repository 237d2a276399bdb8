import { randomBytes, randomUUID } from 'node:crypto';
import { inject, injectable, optional } from 'inversify';
import type { WaitMode } from '../domain/create-request.js';
import { AgentUnavailableError, errorMessage, InternalError } from '../domain/errors.js';
import type { CreatePhase } from '../domain/events.js';
import type { VmRecord } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import { GuestAgent } from '../ports/guest-agent.js';
import { GuestNetwork } from '../ports/guest-network.js';
import { ProcessMeter } from '../ports/process-meter.js';
import { ConsoleLogs, VmStore } from '../ports/stores.js';
import { egressEnv } from '../domain/egress-secrets.js';
import type { ImageInfo } from '../ports/guest-images.js';
import { Logger } from '../ports/logger.js';
import { RemoteShell, SshProbe } from '../ports/tunnels.js';
import { watchBootStall } from './boot-stall.js';
import type { Config } from './config.js';
import { CrashWatch } from './crash-watch.js';
import { GuestShares } from './guest-shares.js';
import { beforeDeadline } from './deadline.js';
import { agentEndpoint, waitReady } from './readiness.js';
import { AppConfig } from './tokens.js';

/** An identity call that took longer than this is followed by one that sets the clock alone. */
export const CLOCK_RESEND_MS = 250;

/**
 * What a guest is told once it answers: `fresh` for a copy (a clone, a pool member, a fork, a
 * create from an image's snapshot); `restored` when it woke from a saved state rather than booted;
 * `grow` when its disk is larger than the one it was saved with; `userdata` to run, which its boot
 * did not.
 */
export interface Identity {
  fresh: boolean;
  restored: boolean;
  grow?: boolean;
  userdata?: string;
}

/**
 * The QEMU process of a guest that cold-booted (`pid`), and how to boot it again in a new one when
 * it hangs (boot-stall.ts): kill it, launch it cold, answer the new pid.
 */
export interface ColdBoot {
  pid?: number;
  again?: () => Promise<number | undefined>;
}

/**
 * A booted or restored guest becoming ready: the wait under the create's mode, and the identity a
 * guest restored from a snapshot needs (its name, clock and, for a clone, machine id).
 */
@injectable()
export class GuestReadiness {
  constructor(
    @inject(GuestAgent) private readonly agent: GuestAgent,
    @inject(SshProbe) private readonly ssh: SshProbe,
    @inject(RemoteShell) private readonly remote: RemoteShell,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
    @inject(CrashWatch) private readonly crashes: CrashWatch,
    @inject(GuestNetwork) private readonly network: GuestNetwork,
    @inject(VmStore) private readonly store: VmStore,
    @inject(AppConfig) private readonly config: Config,
    @inject(ConsoleLogs) @optional() private readonly consoles: ConsoleLogs | undefined,
    @inject(ProcessMeter) @optional() private readonly meter: ProcessMeter | undefined,
    @inject(GuestShares) private readonly shares: GuestShares,
  ) {}

  /** What `wait=auto` means for an image: agent readiness for golden images, SSH otherwise. */
  static waitFor(mode: WaitMode, image: Pick<ImageInfo, 'agent_ready'>): Exclude<WaitMode, 'auto'> {
    return mode === 'auto' ? (image.agent_ready ? 'agent' : 'ssh') : mode;
  }

  /**
   * Waits for the guest under `mode`, and gives a guest with an agent its `identity` when asked
   * (`fresh` for a clone or a pool member: a new machine id, and a failure fails the wait; otherwise
   * a restore of the VM itself, whose failure to set the clock is only logged). A guest `restored`
   * from a snapshot already runs its agent: the identity is the first agent call, in place of the
   * health probe; otherwise it follows the wait, within the deadline. A guest that was cold-booted
   * by process `boot.pid` and hangs before it is first reached is booted again (`boot.again`,
   * boot_stall_retries times, within the deadline: a guest kernel under TCG on a busy host hangs
   * now and then in its timer checks), and then ends the wait within boot_stall_timeout.
   */
  async awaitReady(
    rec: VmRecord,
    mode: Exclude<WaitMode, 'auto'>,
    deadline: number,
    phase: (p: CreatePhase, m: string) => void,
    image?: Pick<ImageInfo, 'agent_ready' | 'ssh_user'>,
    identity?: Identity,
    boot: ColdBoot = {},
  ): Promise<void> {
    this.crashes.forget(rec.name);
    const viaAgent = identity !== undefined && !!image?.agent_ready;
    const folded = viaAgent && identity.restored && mode !== 'ssh';
    const watch = (pid: number | undefined) =>
      this.consoles && this.meter && pid !== undefined && !identity?.restored && this.config.boot_stall_timeout_ms > 0
        ? watchBootStall(
            { consoles: this.consoles, meter: this.meter, clock: this.clock },
            rec.name,
            pid,
            this.config.boot_stall_timeout_ms,
          )
        : undefined;
    let pid = boot.pid;
    for (let tries = 0; ; tries++) {
      const stall = watch(pid);
      try {
        await waitReady(
          { agent: this.agent, ssh: this.ssh, remote: this.remote, clock: this.clock },
          {
            record: rec,
            mode,
            deadline,
            phase: (p, m) => {
              // Past its first answer a guest may idle in silence (userdata, bootstrap): it is not hanging.
              if (p === 'userdata' || p === 'bootstrap') stall?.stop();
              phase(p, m);
            },
            died: () => this.crashes.died(rec.name) ?? stall?.verdict(),
            sshUser: image && !image.agent_ready ? image.ssh_user : undefined,
            firstCall: folded ? () => this.setIdentity(rec, identity.fresh, identity) : undefined,
          },
        );
        break;
      } catch (err) {
        const hung = stall?.verdict();
        // Another try needs a boot's worth of time before the deadline: a stall's wait at least.
        const room = deadline - this.clock.now() > this.config.boot_stall_timeout_ms;
        if (!hung || this.crashes.died(rec.name) || !boot.again || tries >= this.config.boot_stall_retries || !room)
          throw tries > 0 && hung
            ? new InternalError(`${errorMessage(err)}, at each of its ${tries + 1} boots (config boot_stall_retries)`)
            : err;
        this.log.warn({ vm: rec.name, why: hung, try: tries + 1 }, 'guest hung while booting; booting it again');
        phase('boot', `the guest hung while booting; booting it again (config boot_stall_retries): ${hung}`);
        pid = await boot.again();
      } finally {
        stall?.stop();
      }
    }
    if (viaAgent && !folded)
      await beforeDeadline(this.clock, deadline, this.setIdentity(rec, identity.fresh, identity));
    if (identity?.restored) await beforeDeadline(this.clock, deadline, this.shares.mount(rec, deadline));
    if (rec.egress_secrets)
      await beforeDeadline(this.clock, deadline, this.applyEgressSecrets(rec, image?.agent_ready !== false));
  }

  /**
   * A running VM's egress secrets at work: its network puts the values in (and answers the VM's
   * CA), and its guest gets the CA to trust and the placeholders in its processes' environment.
   */
  async applyEgressSecrets(rec: VmRecord, toGuest = !rec.agent_missing): Promise<void> {
    const bindings = rec.egress_secrets ?? [];
    const { ca_pem } = await this.network.setSecrets({ name: rec.name, dir: this.store.dir(rec.name) }, bindings);
    // A guest without an agent gets no variables and no CA: its placeholders (GET .../egress/secrets) are put in place by hand.
    if (toGuest) await this.agent.setEgress(agentEndpoint(rec), { ca_pem, env: egressEnv(bindings) });
  }

  /**
   * A guest restored from a snapshot wakes with the clock (and, for a clone, the name) of the moment
   * it was saved: tell it who it is and what time it is. A clone also gets a fresh machine id.
   */
  async setIdentity(rec: VmRecord, fresh: boolean, more: Pick<Identity, 'grow' | 'userdata'> = {}): Promise<void> {
    const t0 = this.clock.now();
    try {
      await this.agent.setIdentity(agentEndpoint(rec), {
        hostname: rec.name,
        time_ms: this.clock.now(),
        machine_id: fresh ? randomUUID().replace(/-/g, '') : undefined,
        overlay_ip: fresh ? rec.overlay_ip : undefined,
        entropy: fresh ? randomBytes(32).toString('hex') : undefined,
        disk_bytes: more.grow ? rec.disk_gb * 2 ** 30 : undefined,
        userdata: more.userdata,
      });
      // The guest set the time it was given when the call reached it: late by as long as the call
      // took at worst (a guest just woken on a loaded host takes seconds). Now that it answers
      // quickly, the time once more, alone.
      if (this.clock.now() - t0 > CLOCK_RESEND_MS)
        await this.agent
          .setIdentity(agentEndpoint(rec), { hostname: rec.name, time_ms: this.clock.now() })
          .catch((err: unknown) =>
            this.log.warn({ vm: rec.name, err: errorMessage(err) }, 'could not set the guest clock again'),
          );
      this.log.info({ vm: rec.name, identity_ms: this.clock.now() - t0 }, 'identity timing');
    } catch (err) {
      // Not reached yet: the caller decides whether to try again.
      if (fresh || err instanceof AgentUnavailableError) throw err;
      this.log.warn({ vm: rec.name, err: errorMessage(err) }, 'could not reset the guest clock after restore');
    }
  }
}
