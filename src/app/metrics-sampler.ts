import { inject, injectable } from 'inversify';
import { errorMessage } from '../domain/errors.js';
import type { VmRecord } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import { GuestAgent } from '../ports/guest-agent.js';
import { Logger } from '../ports/logger.js';
import { MetricsHistory, type MetricsSeries } from '../ports/stores.js';
import type { Config } from './config.js';
import { Vms } from './vms.js';
import type { LifecycleContribution } from './lifecycle-events.js';
import { agentEndpoint } from './readiness.js';
import { AppConfig } from './tokens.js';

/**
 * Samples guest stats of each running VM with metrics enabled every `sandbox_metrics_interval`
 * into its metrics.ring. The history stays readable when sampling stops.
 */
@injectable()
export class MetricsSampler implements LifecycleContribution {
  private readonly timers = new Map<string, NodeJS.Timeout>();

  constructor(
    @inject(AppConfig) private readonly config: Config,
    @inject(Vms) private readonly vms: Vms,
    @inject(GuestAgent) private readonly agent: GuestAgent,
    @inject(MetricsHistory) private readonly history: MetricsHistory,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
  ) {}

  onUp(rec: VmRecord): void {
    this.start(rec);
  }

  /** The ring is closed before the VM's files go (a ring opening then would make its folder again). */
  onDown(rec: VmRecord): Promise<void> {
    return this.stop(rec.name);
  }

  onRemoved(rec: VmRecord): Promise<void> {
    return this.stop(rec.name);
  }

  private start(rec: VmRecord): void {
    void this.stop(rec.name);
    if (!rec.metrics_enabled) return;
    const name = rec.name;
    const tick = async () => {
      let cur: VmRecord;
      try {
        cur = this.vms.get(name);
      } catch {
        return void this.stop(name);
      }
      // No agent to ask yet (an imported disk before agent/deploy).
      if (cur.status !== 'running' || cur.agent_missing) return;
      try {
        const s = await this.agent.stats(agentEndpoint(cur));
        // Stopped while the agent answered (the VM went, the daemon stops): a ring opened now
        // would never be closed.
        if (this.timers.get(name) !== timer) return;
        await this.history.append(name, {
          t_ms: this.clock.now(),
          uptime_sec: s.uptime_sec,
          load1: s.load1,
          mem_total_bytes: s.mem_total_bytes,
          mem_available_bytes: s.mem_available_bytes,
          disk_total_bytes: s.disk_total_bytes,
          disk_free_bytes: s.disk_free_bytes,
        });
      } catch (err) {
        this.log.debug({ vm: name, err: errorMessage(err) }, 'stats sample skipped');
      }
    };
    const timer = setInterval(() => void tick(), this.config.sandbox_metrics_interval_ms);
    timer.unref();
    this.timers.set(name, timer);
    void tick();
  }

  /** Resolves when the ring is closed, a sample in flight with it (its append then fails, unheard). */
  private stop(name: string): Promise<void> {
    const t = this.timers.get(name);
    if (t) clearInterval(t);
    this.timers.delete(name);
    return this.history.close(name).catch(() => undefined);
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.timers.keys()].map((name) => this.stop(name)));
  }

  /** GET /vms/{name}/metrics: the ring, oldest first. */
  async read(
    name: string,
    opts: { since?: number; limit?: number },
  ): Promise<MetricsSeries & { name: string; enabled: boolean; interval_sec: number }> {
    const rec = this.vms.get(name);
    const series = await this.history.read(name, opts);
    return {
      name,
      enabled: rec.metrics_enabled,
      interval_sec: (series.interval_ms || this.config.sandbox_metrics_interval_ms) / 1000,
      capacity: series.capacity || this.config.sandbox_metrics_points,
      interval_ms: series.interval_ms,
      points: series.points,
    };
  }
}
