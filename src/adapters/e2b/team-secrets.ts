import { randomBytes } from 'node:crypto';
import { AlreadyExistsError, InvalidArgumentError, InvalidStateError, NotFoundError } from '../../domain/errors.js';
import type { Instance } from '../../domain/vm.js';
import type { SvcClient } from '../client/svc-client.js';
import { RecordFile } from './record-file.js';

/**
 * E2B's secrets (the SDK's `Secret`, docs/e2b.md): values a team keeps once and names in its
 * sandboxes' network rules as `${e2b.secrets.NAME}` (`Secret.fill(NAME)`), which the egress path
 * puts in on the way out, so the value never enters a sandbox. Each value is an svc host secret,
 * `e2bsec.<hex>` (sealed like every host secret, read by svc-netd at each request, so an update
 * is in force at once); what E2B shows of it (its name, version, metadata, times) is kept in
 * `<file>`.
 */
export interface TeamSecret {
  secretID: string;
  name: string;
  currentVersion: number;
  metadata: Record<string, string>;
  createdAt: string;
  updatedAt: string;
}

/** The host secret that holds a team secret's value. */
export const TEAM_SECRET = /^e2bsec\.[0-9a-f]{12}$/;
/** What E2B takes as a name: no braces or control characters, as it goes in `${e2b.secrets.NAME}`. */
const NAME = /^[^{}\p{Cc}]{1,128}$/u;
const MAX_VALUE = 16 * 1024;
const MAX_SECRETS = 1000;
const MAX_METADATA = 32;

export class TeamSecrets {
  /** What E2B shows of each secret: changes run one at a time. */
  private readonly records: RecordFile<TeamSecret>;

  constructor(
    private readonly client: SvcClient,
    file: string,
  ) {
    this.records = new RecordFile(file);
  }

  list(): Promise<readonly TeamSecret[]> {
    return this.records.list();
  }

  /** A secret by its id or name. */
  async get(ref: string): Promise<TeamSecret> {
    const s = (await this.list()).find((x) => x.secretID === ref || x.name === ref);
    if (!s) throw new NotFoundError(`secret ${ref} not found`);
    return s;
  }

  /** POST /secrets: a new secret, its value kept as a host secret. */
  create(body: { name?: unknown; value?: unknown; metadata?: unknown }): Promise<TeamSecret> {
    const name = body.name;
    if (typeof name !== 'string' || !NAME.test(name))
      throw new InvalidArgumentError(
        `secret name ${JSON.stringify(name)}: 1 to 128 characters, without { } or control characters`,
      );
    const value = valueOf(body.value);
    const metadata = metadataOf(body.metadata);
    return this.records.change(async (all, save) => {
      if (all.some((s) => s.name === name)) throw new AlreadyExistsError(`secret ${name} exists`);
      if (all.length >= MAX_SECRETS) throw new InvalidStateError(`svc keeps at most ${MAX_SECRETS} secrets`);
      const now = new Date().toISOString();
      const s: TeamSecret = {
        secretID: `sec-${randomBytes(6).toString('hex')}`,
        name,
        currentVersion: 1,
        metadata: metadata ?? {},
        createdAt: now,
        updatedAt: now,
      };
      await this.client.setSecret({ name: hostSecretOf(s), value, mode: '0600' });
      await save([...all, s]);
      return s;
    });
  }

  /** POST /secrets/{id}: a new value (the next version), and new metadata when given. */
  update(ref: string, body: { value?: unknown; metadata?: unknown }): Promise<TeamSecret> {
    const value = valueOf(body.value);
    const metadata = metadataOf(body.metadata);
    return this.records.change(async (all, save) => {
      const s = await this.get(ref);
      await this.client.setSecret({ name: hostSecretOf(s), value, mode: '0600' });
      const next = {
        ...s,
        currentVersion: s.currentVersion + 1,
        metadata: metadata ?? s.metadata,
        updatedAt: new Date().toISOString(),
      };
      await save(all.map((x) => (x === s ? next : x)));
      return next;
    });
  }

  /** DELETE /secrets/{id}: refused while a sandbox's rules name it (their requests would lose it). */
  remove(ref: string, vms: Instance[]): Promise<void> {
    return this.records.change(async (all, save) => {
      const s = await this.get(ref);
      const host = hostSecretOf(s);
      const users = vms.filter((vm) => (vm.egress_secrets ?? []).some((b) => b.secret === host)).map((vm) => vm.name);
      if (users.length) throw new InvalidStateError(`secret ${s.name} is in the network rules of ${users.join(', ')}`);
      await save(all.filter((x) => x !== s));
      await this.client.deleteSecret(host).catch(() => undefined);
    });
  }

  /** The host secret that holds the value of the secret named `name` (a rule's `${e2b.secrets.NAME}`). */
  async hostSecret(name: string): Promise<string> {
    const s = (await this.list()).find((x) => x.name === name);
    if (!s) throw new InvalidArgumentError(`network.rules: no secret named ${JSON.stringify(name)} (Secret.create)`);
    return hostSecretOf(s);
  }
}

const hostSecretOf = (s: TeamSecret) => `e2bsec.${s.secretID.slice(4)}`;

function valueOf(v: unknown): string {
  if (typeof v !== 'string' || !v || v.length > MAX_VALUE || /[\r\n\0]/.test(v))
    throw new InvalidArgumentError(`a secret's value is one line of 1 to ${MAX_VALUE} characters`);
  return v;
}

function metadataOf(v: unknown): Record<string, string> | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'object' || Array.isArray(v)) throw new InvalidArgumentError('metadata must be an object');
  const entries = Object.entries(v as Record<string, unknown>);
  if (
    entries.length > MAX_METADATA ||
    entries.some(([k, x]) => typeof x !== 'string' || k.length > 64 || x.length > 1024)
  )
    throw new InvalidArgumentError(`metadata: at most ${MAX_METADATA} keys (64 characters), string values (1024)`);
  return Object.fromEntries(entries) as Record<string, string>;
}
