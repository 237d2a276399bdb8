import { inject, injectable } from 'inversify';
import { errorMessage } from '../domain/errors.js';
import { Clock } from '../ports/clock.js';
import { Logger } from '../ports/logger.js';
import type { Config } from './config.js';
import { CreateService } from './create-service.js';
import { VmLifecycle } from './vm-lifecycle.js';
import { Vms } from './vms.js';
import type { LifecycleContribution } from './lifecycle-events.js';
import { AppConfig } from './tokens.js';

export interface PoolStatus {
  template: string;
  size: number;
  running: boolean;
  ready: number;
  members: { name: string; status: string }[];
}

const RETRY_MS = 30_000;

/**
 * Keeps `warm_pool.size` clones of `warm_pool.template` ready. A member is a clone started from
 * the template's snapshot, then suspended itself (a claim is a restore, about a second), or, with
 * `running: true`, left running (a claim is a rename, added forwards and a new identity). Refills
 * one member at a time in the background, once claims have stopped coming for
 * `warm_pool.refill_delay`: a refill is a clone, a boot and a suspend, and on a small host a burst
 * of claims that each ran beside the refill for the one before was half as fast (docs/benchmarks.md).
 */
@injectable()
export class PoolService implements LifecycleContribution {
  private filling: Promise<void> | undefined;
  private again = false;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** The refill waiting for claims to stop, and what resolves when it starts (or is dropped). */
  private pending: { timer: NodeJS.Timeout; started: () => void; done: Promise<void> } | undefined;

  constructor(
    @inject(AppConfig) private readonly config: Config,
    @inject(Vms) private readonly vms: Vms,
    @inject(VmLifecycle) private readonly lifecycle: VmLifecycle,
    @inject(CreateService) private readonly creates: CreateService,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
  ) {}

  onClaimed(): void {
    this.refillAfterClaims();
  }

  get enabled(): boolean {
    return this.config.warm_pool.size > 0;
  }

  status(): PoolStatus {
    const { template, size, running } = this.config.warm_pool;
    const members = template ? this.vms.poolMembers(template) : [];
    return {
      template,
      size,
      running,
      ready: members.filter((m) => m.status === (running ? 'running' : 'suspended')).length,
      members: members.map((m) => ({ name: m.name, status: m.status })).sort((a, b) => a.name.localeCompare(b.name)),
    };
  }

  /** Starts (or asks for another round of) filling; never runs two rounds at once. */
  refill(): void {
    if (!this.enabled || this.stopped) return;
    if (this.filling) {
      this.again = true;
      return;
    }
    this.filling = this.fill().finally(() => {
      this.filling = undefined;
      if (this.again && !this.stopped) {
        this.again = false;
        this.refill();
      }
    });
  }

  /** Refills `refill_delay` after the last of a run of claims (each claim starts the wait again). */
  refillAfterClaims(): void {
    const delay = this.config.warm_pool.refill_delay;
    if (delay <= 0) return this.refill();
    this.dropPending();
    let started!: () => void;
    const done = new Promise<void>((r) => {
      started = r;
    });
    const timer = setTimeout(() => {
      this.pending = undefined;
      this.refill();
      started();
    }, delay);
    timer.unref();
    this.pending = { timer, started, done };
  }

  /** Waits for a refill that is waiting or running (tests, benchmarks). */
  async settled(): Promise<void> {
    while (this.pending || this.filling) {
      if (this.pending) await this.pending.done;
      else await this.filling;
    }
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.dropPending();
  }

  private dropPending(): void {
    if (!this.pending) return;
    clearTimeout(this.pending.timer);
    this.pending.started();
    this.pending = undefined;
  }

  private async fill(): Promise<void> {
    const { template, size } = this.config.warm_pool;
    for (;;) {
      const members = this.vms.poolMembers(template);
      if (members.length >= size || this.stopped) return;
      const name = this.freeName(template);
      const t0 = this.clock.now();
      try {
        const job = await this.creates.create(
          { name, from: template, persistent: true },
          { wait: 'auto' },
          { pool: template },
        );
        await job.done;
        if (!this.config.warm_pool.running) await this.lifecycle.suspend(name);
        this.log.info({ member: name, template, duration_ms: this.clock.now() - t0 }, 'warm pool member ready');
      } catch (err) {
        this.log.error(
          { template, err: errorMessage(err) },
          `warm pool refill failed; retrying in ${RETRY_MS / 1000} s`,
        );
        clearTimeout(this.timer);
        this.timer = setTimeout(() => this.refill(), RETRY_MS);
        this.timer.unref();
        return;
      }
    }
  }

  private freeName(template: string): string {
    const base = `pool-${template}`.slice(0, 56);
    for (let i = 1; ; i++) {
      const n = `${base}-${i}`;
      if (!this.vms.find(n)) return n;
    }
  }
}
