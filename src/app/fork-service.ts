import { inject, injectable } from 'inversify';
import { parseWaitMode } from '../domain/create-request.js';
import { AlreadyExistsError, InvalidStateError, NotSupportedError, errorMessage } from '../domain/errors.js';
import type { CreateProgressEvent } from '../domain/events.js';
import { forkNames, parseForkRequest, type ForkRequest } from '../domain/fork-request.js';
import { assertVmName } from '../domain/names.js';
import type { Instance, VmRecord } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import { VmDisks } from '../ports/hypervisor.js';
import { Logger } from '../ports/logger.js';
import { Activity } from './activity.js';
import { AsyncQueue } from './async-queue.js';
import { CreateService, type CreateJob } from './create-service.js';
import { GuestShares } from './guest-shares.js';
import { VmCaptures } from './vm-captures.js';
import { VmLifecycle } from './vm-lifecycle.js';
import { VmKeeper } from './vm-keeper.js';
import { Vms } from './vms.js';

/** What a fork answers: the source's hold and the new VMs (all of them, or none). */
export interface ForkResult {
  source: string;
  paused_ms: number;
  vms: Instance[];
}

export interface ForkJob {
  /** The capture, then every fork's create progress, interleaved (each line names its VM). */
  events: AsyncIterable<CreateProgressEvent>;
  done: Promise<ForkResult>;
}

/**
 * Forks a running (or paused) VM: its state is captured once (the guest held only meanwhile:
 * VmDisks.capture), then each fork is created as a clone standing on that capture, with its own
 * identity (CreateService does what it does for a clone). All or nothing: when one fork fails, the
 * forks already made are deleted; the source runs on either way. The capture's files go from the
 * source once every fork has its own links to them.
 */
@injectable()
export class ForkService {
  constructor(
    @inject(Vms) private readonly vms: Vms,
    @inject(VmDisks) private readonly disks: VmDisks,
    @inject(VmKeeper) private readonly keeper: VmKeeper,
    @inject(CreateService) private readonly creates: CreateService,
    @inject(VmLifecycle) private readonly lifecycle: VmLifecycle,
    @inject(Activity) private readonly activity: Activity,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
    @inject(GuestShares) private readonly shares: GuestShares,
    @inject(VmCaptures) private readonly captures: VmCaptures,
  ) {}

  /**
   * Checks the request and the source, captures the source and starts the forks' creates.
   * Throws before anything is made: InvalidArgumentError, NotFoundError, AlreadyExistsError (a
   * name taken), InvalidStateError (a source that does not run, or has no agent).
   */
  async fork(name: string, body: unknown, query: { wait?: unknown; timeout?: unknown }): Promise<ForkJob> {
    assertVmName(name);
    const req = parseForkRequest(body);
    parseWaitMode(query.wait);
    const src = this.vms.get(name);
    this.check(src);
    const names = this.namesFor(name, req);
    this.vms.checkRoom(names.length, src.cpus, src.memory_mb);
    const t0 = this.clock.now();
    const { id, paused_ms } = await this.activity.timed('fork', name, () =>
      this.vms.withVm(name, async (src) => {
        this.check(src);
        return this.captures.take(src, names.length);
      }),
    );
    const queue = new AsyncQueue<CreateProgressEvent>();
    queue.push({
      phase: 'capture',
      name,
      message: `captured vm ${name} for ${names.length} fork(s); it was held ${paused_ms} ms`,
      t: new Date(this.clock.now()).toISOString(),
      elapsed_ms: this.clock.now() - t0,
      paused_ms,
    });
    const done = this.run(this.vms.get(name), id, names, req, query, queue).finally(() => queue.close());
    done.catch(() => undefined);
    return { events: queue, done: done.then((vms) => ({ source: name, paused_ms, vms })) };
  }

  /** Only a guest that runs can be captured, and a fork with no agent could not be given its identity. */
  private check(src: VmRecord): void {
    if (src.status !== 'running' && src.status !== 'paused')
      throw new InvalidStateError(
        `vm ${src.name} is ${src.status}; a fork needs a running or paused vm${src.status === 'stopped' || src.status === 'suspended' ? ` (clone it instead: svc clone ${src.name})` : ''}`,
      );
    if (src.agent_missing)
      throw new InvalidStateError(`vm ${src.name} has no svc-agent; its forks could not be given their own identity`);
    // Host folders are let go of for the capture and given to each fork as it wakes.
    if (src.mounts.length && !this.shares.restorable(src))
      throw new NotSupportedError(
        `vm ${src.name} shares host folders, which this hypervisor attaches only when a guest boots: it cannot be forked`,
      );
    if (src.mounts.length && src.status === 'paused')
      throw new InvalidStateError(
        `vm ${src.name} is paused and shares host folders, which its guest lets go of for the capture: resume it first`,
      );
  }

  /** The forks' names: those asked for (each free), else `<source>-fork-N` from the first free N. */
  private namesFor(source: string, req: ForkRequest): string[] {
    if (req.names) {
      const taken = req.names.find((n) => this.vms.find(n));
      if (taken) throw new AlreadyExistsError(`vm ${taken} already exists`);
      return req.names;
    }
    return forkNames(source, req.count, (n) => !!this.vms.find(n));
  }

  private async run(
    source: VmRecord,
    capture: string,
    names: string[],
    req: ForkRequest,
    query: { wait?: unknown; timeout?: unknown },
    queue: AsyncQueue<CreateProgressEvent>,
  ): Promise<Instance[]> {
    const jobs: CreateJob[] = [];
    let refused: unknown;
    try {
      for (const n of names) {
        // A fork shares its source's host folders, as the source's processes expect.
        const body = { name: n, tags: req.tags, persistent: req.persistent, mounts: source.mounts };
        jobs.push(await this.creates.create(body, query, { fork: { source, capture } }));
      }
    } catch (err) {
      refused = err; // a cap reached or a name taken meanwhile: the forks begun are undone below
    }
    const pumps = jobs.map(async (j) => {
      for await (const ev of j.events) queue.push(ev);
    });
    const results = await Promise.allSettled(jobs.map((j) => j.done));
    await Promise.all(pumps);
    await this.disks.dropCapture(this.keeper.ref(source), capture).catch((err: Error) => {
      this.log.warn({ vm: source.name, capture, err: err.message }, 'cannot drop a capture');
    });
    const failed = refused ?? results.find((r) => r.status === 'rejected')?.reason;
    if (failed === undefined) return results.map((r) => (r as PromiseFulfilledResult<Instance>).value);
    for (const r of results) {
      if (r.status !== 'fulfilled') continue;
      await this.lifecycle.delete(r.value.name).catch(() => undefined);
      queue.push({
        phase: 'error',
        name: r.value.name,
        message: `removed: another fork of ${source.name} failed (${errorMessage(failed)})`,
        error: errorMessage(failed),
        t: new Date(this.clock.now()).toISOString(),
        elapsed_ms: 0,
      });
    }
    throw failed;
  }
}
