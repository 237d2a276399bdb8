import { inject, injectable } from 'inversify';
import { parseMode, formatMode } from '../domain/agent.js';
import { InvalidArgumentError } from '../domain/errors.js';
import type { SecretRecord } from '../domain/events.js';
import { assertSecretName } from '../domain/names.js';
import { GuestAgent } from '../ports/guest-agent.js';
import { SecretStore } from '../ports/stores.js';
import { Activity } from './activity.js';
import { GuestProxy } from './guest-proxy.js';
import { Vms } from './vms.js';

export const MAX_SECRET_BYTES = 512 * 1024;

/** Host secrets: validated here, encrypted by the store, never logged or echoed. */
@injectable()
export class SecretService {
  constructor(
    @inject(SecretStore) private readonly store: SecretStore,
    @inject(Activity) private readonly activity: Activity,
    @inject(Vms) private readonly vms: Vms,
    @inject(GuestAgent) private readonly agent: GuestAgent,
  ) {}

  /**
   * Decrypts a host secret and materializes it in the guest through the agent. Optional body
   * `{path, mode, uid, gid}`; the default path is `/run/svc/secrets/<name>`, mode the secret's.
   */
  async inject(
    vm: string,
    secretName: string,
    body: unknown,
  ): Promise<{ name: string; secret: string; path: string; mode: string }> {
    assertSecretName(secretName);
    const b = (body ?? {}) as Record<string, unknown>;
    if (typeof b !== 'object' || Array.isArray(b))
      throw new InvalidArgumentError('body must be a JSON object {path?, mode?, uid?, gid?}');
    for (const k of Object.keys(b))
      if (!['path', 'mode', 'uid', 'gid'].includes(k)) throw new InvalidArgumentError(`unknown field "${k}"`);
    if (b.path !== undefined && (typeof b.path !== 'string' || !b.path.startsWith('/')))
      throw new InvalidArgumentError('path must be an absolute guest path');
    const mode = b.mode === undefined ? undefined : parseMode(b.mode, 0o600);
    if (mode !== undefined && Number.isNaN(mode))
      throw new InvalidArgumentError('mode must be an octal string such as "0600"');
    for (const k of ['uid', 'gid'] as const) {
      if (b[k] !== undefined && (!Number.isInteger(b[k]) || (b[k] as number) < 0))
        throw new InvalidArgumentError(`${k} must be a non-negative integer`);
    }
    const ep = GuestProxy.endpointOf(this.vms.get(vm));
    const { record, value } = await this.store.get(secretName);
    const out = await this.activity.timed('secret.inject', `${vm}:${secretName}`, () =>
      this.agent.materialize(ep, {
        name: secretName,
        data: value.toString('base64'),
        mode: mode === undefined ? record.mode : formatMode(mode),
        path: b.path as string | undefined,
        uid: b.uid as number | undefined,
        gid: b.gid as number | undefined,
      }),
    );
    return { name: vm, secret: secretName, path: out.path, mode: out.mode };
  }

  list(): Promise<SecretRecord[]> {
    return this.store.list();
  }

  /** Body `{name, value}` or `{name, data_base64}`, optional `mode`. Creates or replaces. */
  async put(body: unknown): Promise<SecretRecord> {
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      throw new InvalidArgumentError('secret body must be a JSON object {name, value | data_base64, mode?}');
    }
    const b = body as Record<string, unknown>;
    for (const k of Object.keys(b)) {
      if (!['name', 'value', 'data_base64', 'mode'].includes(k))
        throw new InvalidArgumentError(`unknown field "${k}" in secret`);
    }
    const name = assertSecretName(b.name);
    if ((b.value === undefined) === (b.data_base64 === undefined)) {
      throw new InvalidArgumentError('give exactly one of value or data_base64');
    }
    let value: Buffer;
    if (b.value !== undefined) {
      if (typeof b.value !== 'string') throw new InvalidArgumentError('value must be a string');
      value = Buffer.from(b.value, 'utf8');
    } else {
      if (typeof b.data_base64 !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(b.data_base64)) {
        throw new InvalidArgumentError('data_base64 must be base64 text');
      }
      value = Buffer.from(b.data_base64, 'base64');
    }
    if (value.length > MAX_SECRET_BYTES)
      throw new InvalidArgumentError(`secret is larger than ${MAX_SECRET_BYTES} bytes`);
    const mode = parseMode(b.mode, 0o600);
    if (Number.isNaN(mode)) throw new InvalidArgumentError('mode must be an octal string such as "0600"');
    const rec = await this.store.put(name, value, formatMode(mode));
    this.activity.record('secret.set', name);
    return rec;
  }

  async remove(name: string): Promise<{ message: string; name: string }> {
    assertSecretName(name);
    await this.store.remove(name);
    this.activity.record('secret.delete', name);
    return { message: `secret ${name} deleted`, name };
  }
}
