import { createHash, createHmac, randomBytes } from 'node:crypto';
import type { Request } from 'express';
import type { IncomingMessage } from 'node:http';
import { InvalidArgumentError, NotFoundError, UnauthenticatedError } from '../../domain/errors.js';
import type { Instance } from '../../domain/vm.js';
import type { SvcClient } from '../client/svc-client.js';
import { AuthThrottle, sameSecret } from '../http-kit/auth.js';

/**
 * What E2B's front door knows of a sandbox beyond its VM: all of it in the VM's tags, so a daemon
 * restart loses nothing but the timers, which are set again from `e2b/end_at` (docs/e2b.md).
 */
const T = {
  marker: 'e2b',
  template: 'e2b/template',
  endAt: 'e2b/end_at',
  onTimeout: 'e2b/on_timeout',
  meta: 'e2b/m/',
  env: 'e2b/env/',
  privateTraffic: 'e2b/private_traffic',
  autoResume: 'e2b/auto_resume',
  workdir: 'e2b/workdir',
} as const;

/** A snapshot (docs/e2b.md): a suspended persistent VM forked from a sandbox, which creates clone. */
const SNAP = { of: 'e2b/snapshot_of', name: 'e2b/snapshot_name' } as const;

/** The tags of a snapshot of sandbox `of`, with its name when it has one. */
export function snapshotTags(of: string, name?: string): Record<string, string> {
  return { [SNAP.of]: of, ...(name ? { [SNAP.name]: name } : {}) };
}

/** The snapshot a VM is, or undefined when it is none. */
export function snapshotOf(vm: Instance): { snapshotID: string; sandboxID: string; names: string[] } | undefined {
  const of = vm.tags[SNAP.of];
  if (of === undefined) return undefined;
  const name = vm.tags[SNAP.name];
  return { snapshotID: vm.name, sandboxID: of, names: name ? [name] : [] };
}

/** Where E2B's relative paths and commands start: its default user's home, which is root's in svc. */
export const E2B_HOME = '/root';

/** E2B's user in the guest: its default `user` and `root` are the agent's root (undefined); others are themselves. */
export function guestUser(name: string | undefined): string | undefined {
  return !name || name === 'user' || name === 'root' ? undefined : name;
}

/** A sandbox env's name as svc keeps it in a tag (`e2b/env/<name>`, 63 characters at most). */
export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,54}$/;

/** The version of envd the SDK is told: new enough for every feature svc serves (stdin close, octet-stream uploads). */
export const ENVD_VERSION = '0.5.7';
/** A sandbox's default life when the create gives none (E2B's default). */
export const DEFAULT_TIMEOUT_S = 300;
/** The longest life a create or setTimeout may ask for: 24 hours, as E2B's own limit. */
export const MAX_TIMEOUT_S = 86_400;

export interface SandboxMeta {
  template: string;
  endAt: Date;
  onTimeout: 'kill' | 'pause';
  metadata: Record<string, string>;
  envs: Record<string, string>;
  /** `network.allowPublicTraffic: false`: its ports' URLs need the traffic token (sandbox-hosts.ts). */
  privateTraffic?: boolean;
  /** `lifecycle.autoResume`: paused at its timeout, it comes back for the next envd call. */
  autoResume?: boolean;
  /** Where its commands start when they name no folder: its template's WORKDIR. */
  workdir?: string;
}

export function isSandbox(vm: Instance): boolean {
  return vm.tags[T.marker] === '1';
}

export function metaOf(vm: Instance): SandboxMeta {
  const metadata: Record<string, string> = {};
  const envs: Record<string, string> = {};
  for (const [k, v] of Object.entries(vm.tags)) {
    if (k.startsWith(T.meta)) metadata[k.slice(T.meta.length)] = v;
    else if (k.startsWith(T.env)) envs[k.slice(T.env.length)] = v;
  }
  const endAt = new Date(vm.tags[T.endAt] ?? Date.now() + DEFAULT_TIMEOUT_S * 1000);
  return {
    template: vm.tags[T.template] ?? 'base',
    endAt,
    onTimeout: vm.tags[T.onTimeout] === 'pause' ? 'pause' : 'kill',
    metadata,
    envs,
    privateTraffic: vm.tags[T.privateTraffic] === '1',
    autoResume: vm.tags[T.autoResume] === '1',
    ...(vm.tags[T.workdir] ? { workdir: vm.tags[T.workdir] } : {}),
  };
}

/** The tags a new sandbox's VM is created with. */
export function tagsFor(m: SandboxMeta): Record<string, string> {
  const tags: Record<string, string> = {
    [T.marker]: '1',
    [T.template]: m.template,
    [T.endAt]: m.endAt.toISOString(),
    [T.onTimeout]: m.onTimeout,
    ...(m.privateTraffic ? { [T.privateTraffic]: '1' } : {}),
    ...(m.autoResume ? { [T.autoResume]: '1' } : {}),
    ...(m.workdir ? { [T.workdir]: m.workdir } : {}),
  };
  for (const [k, v] of Object.entries(m.metadata)) {
    if (!/^[A-Za-z0-9._-]{1,56}$/.test(k))
      throw new InvalidArgumentError(`metadata key ${JSON.stringify(k)}: svc takes letters, digits, . _ - (1 to 56)`);
    if (typeof v !== 'string') throw new InvalidArgumentError(`metadata ${k} must be a string`);
    tags[T.meta + k] = v;
  }
  for (const [k, v] of Object.entries(m.envs)) {
    if (!ENV_NAME.test(k))
      throw new InvalidArgumentError(`envVars: ${JSON.stringify(k)} is not a variable name svc takes`);
    if (typeof v !== 'string') throw new InvalidArgumentError(`envVars ${k} must be a string`);
    tags[T.env + k] = v;
  }
  return tags;
}

/** What a sandbox's timeout does to its VM: delete it, or suspend it (autoPause). */
export function onExpireOf(m: Pick<SandboxMeta, 'onTimeout'>): 'delete' | 'suspend' {
  return m.onTimeout === 'pause' ? 'suspend' : 'delete';
}

/** A timeout in seconds from a request, within E2B's limits. */
export function timeoutSeconds(v: unknown): number {
  if (v === undefined || v === null) return DEFAULT_TIMEOUT_S;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > MAX_TIMEOUT_S)
    throw new InvalidArgumentError(
      `timeout must be whole seconds from 0 to ${MAX_TIMEOUT_S}, got ${JSON.stringify(v)}`,
    );
  return v;
}

/**
 * Keys and deadlines: who may call, the access token each sandbox's envd calls carry, and the
 * timers that kill or pause a sandbox at its end.
 */
export class Sandboxes {
  private readonly key: Buffer;

  constructor(
    private readonly client: SvcClient,
    private readonly apiToken: string,
    /** The daemon's pace for wrong credentials, shared with its bearer check. */
    private readonly throttle: AuthThrottle = new AuthThrottle(),
  ) {
    this.key = apiToken ? Buffer.from(apiToken) : randomBytes(32);
  }

  /** The control API's key (`X-API-KEY`, or a bearer token): the daemon's token, any key when it has none. */
  async checkApiKey(req: Request): Promise<void> {
    if (!this.apiToken) return;
    const given = String(req.headers['x-api-key'] ?? /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? '');
    if (!(await this.throttle.paced(req, () => sameSecret(given, this.apiToken))))
      throw new UnauthenticatedError('invalid API key');
  }

  /** The token a sandbox's envd calls carry (`X-Access-Token`), derived from the daemon's key. */
  accessToken(id: string): string {
    return createHmac('sha256', this.key).update(`e2b-envd:${id}`).digest('hex');
  }

  /** The token a private sandbox's port URLs need (`e2b-traffic-access-token`, sandbox-hosts.ts). */
  trafficToken(id: string): string {
    return createHmac('sha256', this.key).update(`e2b-traffic:${id}`).digest('hex');
  }

  /** A request to a private sandbox's port: its traffic token, paced like wrong keys when wrong. */
  async checkTraffic(req: IncomingMessage, id: string): Promise<void> {
    const given = String(req.headers['e2b-traffic-access-token'] ?? '');
    if (!(await this.throttle.paced(req, () => sameSecret(given, this.trafficToken(id)))))
      throw new UnauthenticatedError(`sandbox ${id} takes traffic with its e2b-traffic-access-token header only`);
  }

  /** An envd call: the sandbox it names (`E2b-Sandbox-Id`), when its access token is right. */
  async sandboxOf(req: Request): Promise<string> {
    const id = String(req.headers['e2b-sandbox-id'] ?? '');
    if (!id) throw new InvalidArgumentError('the E2b-Sandbox-Id header is required (set E2B_SANDBOX_URL to svc)');
    const given = String(req.headers['x-access-token'] ?? '');
    if (this.apiToken && !(await this.throttle.paced(req, () => sameSecret(given, this.accessToken(id)))))
      throw new UnauthenticatedError('invalid access token for this sandbox');
    return id;
  }

  /**
   * The sandbox a signed file URL is for (`sandbox.uploadUrl`/`downloadUrl`): the SDK signs
   * `path:operation:user:accessToken[:expiration]` with SHA-256 and sends no sandbox id, so the
   * sandbox is the one whose access token makes the signature (each token is its own: nobody
   * without it can make one). An expired or wrong signature is 401, paced like wrong keys.
   */
  async signedSandbox(req: Request, operation: 'read' | 'write'): Promise<string> {
    const q = req.query as Record<string, unknown>;
    const signature = typeof q.signature === 'string' ? q.signature : '';
    if (!signature.startsWith('v1_'))
      throw new UnauthenticatedError("this is a sandbox's signed file URL: it needs its signature");
    const expiration = q.signature_expiration;
    if (expiration !== undefined && !(typeof expiration === 'string' && /^\d{1,12}$/.test(expiration)))
      throw new InvalidArgumentError('signature_expiration must be a time in whole seconds');
    if (expiration !== undefined && Number(expiration) < Date.now() / 1000)
      throw new UnauthenticatedError('this signed URL has expired');
    const path = typeof q.path === 'string' ? q.path : '';
    const user = typeof q.username === 'string' ? q.username : '';
    const signs = (id: string) => {
      const raw = [path, operation, user, this.accessToken(id), ...(expiration !== undefined ? [expiration] : [])];
      return `v1_${createHash('sha256').update(raw.join(':')).digest('base64').replace(/=+$/, '')}`;
    };
    const found = (await this.client.list()).find((vm) => isSandbox(vm) && sameSecret(signature, signs(vm.name)));
    if (!(await this.throttle.paced(req, () => found !== undefined)) || !found)
      throw new UnauthenticatedError(`invalid signature for ${operation} of ${JSON.stringify(path)}`);
    return found.name;
  }

  /** The VM of a sandbox: not found when it is not one. */
  async get(id: string): Promise<Instance> {
    const vm = await this.client.get(id);
    if (!isSandbox(vm)) throw new NotFoundError(`sandbox ${id} not found`);
    return vm;
  }

  /** When the sandbox ends: its VM's lifetime (svc's ttl), else the create's end in its tags. */
  endOf(vm: Instance): Date {
    return vm.expires_at ? new Date(vm.expires_at) : metaOf(vm).endAt;
  }

  /**
   * Sets the sandbox's end: svc's own lifetime of its VM (docs/api.md, "Lifetime"), which kills it,
   * or suspends it when it was created to pause. The daemon keeps it across restarts.
   */
  async arm(vm: Instance, end: Date): Promise<void> {
    const seconds = Math.max(1, Math.ceil((end.getTime() - Date.now()) / 1000));
    await this.client.setTtl(vm.name, seconds, onExpireOf(metaOf(vm)));
  }

  /**
   * Brings a paused sandbox back (E2B's connect, and a call to one created with
   * `lifecycle.autoResume`): its VM restored or resumed. Its timeout is set once: to `timeoutS`
   * when given (also for a sandbox that was running), else, when woken, to the time it had left
   * (E2B's default when none). Answers the VM as it now is, and whether it was woken.
   */
  async wake(vm: Instance, timeoutS?: number): Promise<{ vm: Instance; woken: boolean }> {
    const woken = vm.status === 'suspended' || vm.status === 'paused';
    if (vm.status === 'suspended') vm = await this.client.restore(vm.name);
    else if (vm.status === 'paused') {
      await this.client.resume(vm.name);
      vm = await this.client.get(vm.name);
    }
    if (timeoutS !== undefined) await this.arm(vm, new Date(Date.now() + timeoutS * 1000));
    else if (woken) {
      const left = this.endOf(vm).getTime() - Date.now();
      await this.arm(vm, new Date(Date.now() + (left > 0 ? left : DEFAULT_TIMEOUT_S * 1000)));
    }
    return { vm, woken };
  }

  /** The sandbox of a call (envd, or traffic to a port): woken first when it was created to be (`lifecycle.autoResume`). */
  async forCall(vm: Instance): Promise<Instance> {
    return vm.status !== 'running' && metaOf(vm).autoResume ? (await this.wake(vm)).vm : vm;
  }
}
