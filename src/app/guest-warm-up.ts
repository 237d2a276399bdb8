import { randomBytes, randomUUID } from 'node:crypto';
import { inject, injectable, optional } from 'inversify';
import { AgentUnavailableError } from '../domain/errors.js';
import type { VmRecord } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import { CloneSpeedUps, type GuestWarmUpCalls } from '../ports/clone-speed-ups.js';
import { GuestAgent } from '../ports/guest-agent.js';
import { agentEndpoint } from './readiness.js';

/** How long a save waits for the warm-up (a guest that does not answer is saved as is). */
const WARM_MS = 3000;

/**
 * A restored guest runs its first calls slower than a guest that has run them lately: what it
 * does then was cold when it was saved (docs/suspend-and-clones.md measures it). Where the driver
 * restores guests ahead of clones (CloneSpeedUps), this runs those calls once: before a running
 * guest is saved, and in a guest restored ahead of a clone.
 */
@injectable()
export class GuestWarmUp {
  constructor(
    @inject(GuestAgent) private readonly agent: GuestAgent,
    @inject(Clock) private readonly clock: Clock,
    @inject(CloneSpeedUps) @optional() private readonly speedUps: CloneSpeedUps | undefined,
  ) {}

  /** Offers the calls to the driver (the composition root calls it once). */
  start(): void {
    this.speedUps?.warmWith(this.calls);
  }

  /**
   * Before a running guest is saved: the identity it already has, once more, then one exec of
   * `sync` (which also leaves its clones no writeback of the template's own to do). Best effort and
   * bounded: a guest without an agent is saved as is. Nothing when the driver restores no guests ahead.
   */
  async beforeSave(rec: VmRecord): Promise<void> {
    if (!this.speedUps) return;
    const ep = agentEndpoint(rec);
    const until = this.clock.now() + WARM_MS;
    // The exec gets what is left of the bound, so no `sync` is still running in the saved guest.
    const calls = this.agent
      .setIdentity(ep, { hostname: rec.name, time_ms: this.clock.now() })
      .then(() => this.agent.exec(ep, { cmd: 'sync', args: [], timeoutMs: Math.max(1, until - this.clock.now()) }))
      .catch(() => undefined);
    await Promise.race([calls, this.clock.sleep(WARM_MS)]);
  }

  /**
   * What a guest restored ahead of a clone runs: its identity under its own name with a machine
   * id, then an exec of `true`. A just-restored agent may not be reachable for a moment: the
   * identity is tried again every 100 ms, 20 times at most. An image without `true` still took the
   * exec path: only a guest that cannot be reached fails that step.
   */
  readonly calls: GuestWarmUpCalls = {
    firstAnswer: async (ep, name) => {
      for (let tries = 1; ; tries++) {
        try {
          return await this.agent.setIdentity(ep, {
            hostname: name,
            time_ms: this.clock.now(),
            machine_id: randomUUID().replace(/-/g, ''),
            entropy: randomBytes(32).toString('hex'),
          });
        } catch (err) {
          if (!(err instanceof AgentUnavailableError) || tries >= 20) throw err;
          await this.clock.sleep(100);
        }
      }
    },
    firstCommand: async (ep) => {
      await this.agent.exec(ep, { cmd: 'true', args: [], timeoutMs: WARM_MS }).catch((err: unknown) => {
        if (err instanceof AgentUnavailableError) throw err;
      });
    },
  };
}
