import { inject, injectable, optional } from 'inversify';
import { asDomainError, logLevelOf } from '../domain/errors.js';
import type { CreatePhase, CreateProgressEvent } from '../domain/events.js';
import type { Instance, VmRecord } from '../domain/vm.js';
import { changeStatus, toPublic } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import { Logger } from '../ports/logger.js';
import { ControlMetrics } from '../ports/metrics.js';
import { ConsoleLogs } from '../ports/stores.js';
import { Activity } from './activity.js';
import { progressEmitter, type AsyncQueue } from './async-queue.js';
import type { Config } from './config.js';
import { withConsoleTail } from './console-tail.js';
import { LifecycleEvents } from './lifecycle-events.js';
import { AppConfig } from './tokens.js';
import { VmKeeper } from './vm-keeper.js';
import { Vms } from './vms.js';

export interface CreateJob {
  name: string;
  /** Progress events; the last is `ready` or `error`. Reading is optional: the create runs anyway. */
  events: AsyncIterable<CreateProgressEvent>;
  /** Resolves with the ready instance or rejects with the domain error that failed the create. */
  done: Promise<Instance>;
}

/** Says how far one create has come: a phase and a message, with what the phase adds. */
export type CreateEmit = (phase: CreatePhase, message: string, extra?: Partial<CreateProgressEvent>) => void;

/**
 * How every create begins and ends, whichever way it makes its VM (a boot, a clone, a pool claim):
 * its progress events, and the bookkeeping of a success (running, announced, counted, logged) or
 * of a failure (nothing left behind but the logs).
 */
@injectable()
export class CreateOutcomes {
  constructor(
    @inject(AppConfig) private readonly config: Config,
    @inject(Vms) private readonly vms: Vms,
    @inject(VmKeeper) private readonly keeper: VmKeeper,
    @inject(LifecycleEvents) private readonly events: LifecycleEvents,
    @inject(ControlMetrics) private readonly metrics: ControlMetrics,
    @inject(Activity) private readonly activity: Activity,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
    @inject(ConsoleLogs) @optional() private readonly consoles: ConsoleLogs | undefined,
  ) {}

  /** A progress emitter for one create; `t0` is when it was accepted. */
  emitter(rec: VmRecord, queue: AsyncQueue<CreateProgressEvent>, t0: number): CreateEmit {
    return progressEmitter(queue, () => this.clock.now(), rec.name, t0);
  }

  /**
   * The end of every successful create: running, announced, counted, logged, `ready`. `message`
   * notes a pool claim in the activity log; `warning` goes into the answer (a cold-booted clone).
   */
  async created(
    rec: VmRecord,
    t0: number,
    emit: CreateEmit,
    log: object,
    { message, warning }: { message?: string; warning?: string } = {},
  ): Promise<Instance> {
    changeStatus(rec, { to: 'running' });
    await this.vms.save(rec);
    await this.events.emit('up', rec);
    this.metrics.vmCreated();
    this.metrics.createDuration((this.clock.now() - t0) / 1000, 'ok');
    this.activity.record('create', rec.name, 'ok', message ?? warning, this.clock.now() - t0);
    this.log.info(
      { vm: rec.name, ...log, duration_ms: this.clock.now() - t0 },
      message ? 'pool claim timing' : 'create timing',
    );
    const inst = warning ? { ...toPublic(rec), warning } : toPublic(rec);
    emit('ready', `vm ${rec.name} is ready`, { instance: inst });
    return inst;
  }

  /** The end of every failed create: nothing left behind but the logs, counted, `error`. */
  async failed(rec: VmRecord, err: unknown, t0: number, emit: CreateEmit): Promise<never> {
    const domainErr = await withConsoleTail(
      this.consoles,
      rec,
      asDomainError(err),
      `the console log is kept in ${this.config.data_dir}/logs`,
    );
    await this.keeper.purge(rec, true);
    this.metrics.createFailed();
    this.metrics.createDuration((this.clock.now() - t0) / 1000, 'error');
    this.activity.record('create', rec.name, 'error', domainErr.message, this.clock.now() - t0);
    this.log[logLevelOf(domainErr)](
      { vm: rec.name, err: domainErr.message, code: domainErr.code, duration_ms: this.clock.now() - t0 },
      'create failed',
    );
    emit('error', domainErr.message, { error: domainErr.message, code: domainErr.code });
    throw domainErr;
  }
}
