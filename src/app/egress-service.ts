import { randomBytes } from 'node:crypto';
import { inject, injectable } from 'inversify';
import { parseEgressPolicy, type EgressEvent, type EgressPolicy } from '../domain/egress.js';
import { hasProcess, type VmRecord } from '../domain/vm.js';
import { Clock } from '../ports/clock.js';
import { GuestNetwork } from '../ports/guest-network.js';
import { ControlMetrics } from '../ports/metrics.js';
import { SecretStore, VmStore } from '../ports/stores.js';
import {
  bindEgressSecrets,
  parseEgressSecretSpecs,
  type EgressSecretBinding,
  type EgressSecretSpec,
} from '../domain/egress-secrets.js';
import { InvalidArgumentError } from '../domain/errors.js';
import { Activity } from './activity.js';
import { AsyncQueue } from './async-queue.js';
import type { LifecycleContribution } from './lifecycle-events.js';
import { Vms } from './vms.js';
import { GuestReadiness } from './guest-readiness.js';

/** Entries a follower may fall behind by before it is dropped (it reads the log again). */
const FOLLOW_BACKLOG = 1000;
/** At most one activity entry of refusals per VM this often; the rest are counted into it. */
const ACTIVITY_EVERY_MS = 1000;

/**
 * A VM's egress policy and what it decided (docs/network.md): read and replaced live, the log of
 * decisions read or followed; every decision counted in the metrics, refusals noted in the
 * activity log (folded per VM and second, so a guest that scans cannot flood it).
 */
@injectable()
export class EgressService implements LifecycleContribution {
  private readonly refused = new Map<string, { at: number; more: number }>();

  constructor(
    @inject(Vms) private readonly vms: Vms,
    @inject(GuestNetwork) private readonly network: GuestNetwork,
    @inject(VmStore) private readonly store: VmStore,
    @inject(ControlMetrics) private readonly metrics: ControlMetrics,
    @inject(Activity) private readonly activity: Activity,
    @inject(Clock) private readonly clock: Clock,
    @inject(SecretStore) private readonly secretStore: SecretStore,
    @inject(GuestReadiness) private readonly readiness: GuestReadiness,
  ) {}

  /** The VM's egress secrets (docs/egress-secrets.md): bindings with their placeholders, never values. */
  secrets(name: string): EgressSecretBinding[] {
    return this.vms.get(name).egress_secrets ?? [];
  }

  /**
   * Replaces the VM's egress secrets (body: a list of bindings, or `{egress_secrets: [...]}`): a
   * secret it had keeps its placeholder. For a running VM in force for the next request, and its
   * guest's variables and CA updated. InvalidArgumentError for a bad binding or an unknown secret.
   */
  async putSecrets(name: string, body: unknown): Promise<EgressSecretBinding[]> {
    const list = Array.isArray(body) ? body : (body as { egress_secrets?: unknown } | null)?.egress_secrets;
    const specs = parseEgressSecretSpecs(list);
    await assertSecretsExist(this.secretStore, specs);
    return this.activity.timed('egress-secrets', name, () =>
      this.vms.withVm(name, async (rec) => {
        rec.egress_secrets = bindEgressSecrets(specs, randomBytes, rec.egress_secrets);
        await this.vms.save(rec);
        if (rec.status === 'running') await this.readiness.applyEgressSecrets(rec);
        return rec.egress_secrets;
      }),
    );
  }

  /** Starts counting and noting decisions (the composition root calls it once). */
  start(): () => void {
    return this.network.watch((e) => this.decided(e));
  }

  /** A deleted VM's series go. */
  onRemoved(rec: VmRecord): void {
    this.metrics.forgetVm(rec.name);
    this.refused.delete(rec.name);
  }

  get(name: string): EgressPolicy {
    return this.vms.get(name).egress;
  }

  /**
   * Replaces the VM's policy: kept in its record (a restart, a restore and its clones take it), and
   * for a running VM in force at once, open connections it forbids closed. InvalidArgumentError for
   * a bad policy, before anything changes.
   */
  async put(name: string, body: unknown): Promise<EgressPolicy> {
    const policy = parseEgressPolicy(body);
    return this.activity.timed('egress', name, () =>
      this.vms.withVm(name, async (rec) => {
        rec.egress = policy;
        await this.vms.save(rec);
        if (hasProcess(rec.status)) await this.network.setPolicy({ name, dir: this.store.dir(name) }, policy);
        return policy;
      }),
    );
  }

  log(name: string, query: { limit: number; sinceMs?: number }): Promise<EgressEvent[]> {
    this.vms.get(name);
    return this.network.log({ name, dir: this.store.dir(name) }, query);
  }

  /** The VM's decisions from now on, until `signal` aborts (or the reader falls too far behind). */
  follow(name: string, signal: AbortSignal): AsyncIterable<EgressEvent> {
    this.vms.get(name);
    const queue = new AsyncQueue<EgressEvent>();
    let backlog = 0;
    const stop = () => {
      unwatch();
      queue.close();
      signal.removeEventListener('abort', stop);
    };
    const unwatch = this.network.watch((e) => {
      if (e.vm !== name) return;
      if (++backlog > FOLLOW_BACKLOG) return stop();
      queue.push(e);
    });
    // A caller gone before the follow began (its request closed on the way) follows nothing.
    if (signal.aborted) stop();
    else signal.addEventListener('abort', stop, { once: true });
    return (async function* () {
      for await (const e of queue) {
        backlog--;
        yield e;
      }
    })();
  }

  private decided(e: EgressEvent): void {
    if (e.event === 'close') return;
    this.metrics.egressDecision(e.vm, e.decision, e.repeats ?? 0, e.event === 'dns');
    if (e.decision !== 'deny') return;
    const now = this.clock.now();
    const r = this.refused.get(e.vm);
    if (r && now - r.at < ACTIVITY_EVERY_MS) {
      r.more++;
      return;
    }
    const more = r?.more ?? 0;
    this.refused.set(e.vm, { at: now, more: 0 });
    if (this.refused.size > 10_000) this.refused.clear();
    const what =
      `${e.proto} ${e.name ?? ''}${e.name && e.addr ? ' ' : ''}${e.addr ?? ''}${e.port ? `:${e.port}` : ''}`.trim();
    this.activity.record(
      'egress-deny',
      e.vm,
      'error',
      `${what} refused by ${e.rule}${more ? ` (and ${more} more refusals)` : ''}`,
    );
  }
}

/** Every secret the bindings name is a host secret now: InvalidArgumentError naming the first that is not. */
export async function assertSecretsExist(store: SecretStore, specs: EgressSecretSpec[]): Promise<void> {
  if (!specs.length) return;
  const have = new Set((await store.list()).map((s) => s.name));
  const missing = specs.find((s) => !have.has(s.secret));
  if (missing)
    throw new InvalidArgumentError(
      `egress_secrets: there is no host secret ${missing.secret} (add it with POST /secrets or svc secret set NAME)`,
    );
}
