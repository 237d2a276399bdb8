import { hostname } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { inject, injectable } from 'inversify';
import type { AgentHealth, GuestIdentity, GuestStats, MaterializeRequest, Readiness } from '../../domain/agent.js';
import { AGENT_FEATURES, USERDATA_MAX_BYTES } from '../../domain/agent.js';
import { SystemIdentity } from '../../ports/agent/system-identity.js';
import { formatMode, parseMode } from '../../domain/agent.js';
import { InvalidArgumentError } from '../../domain/errors.js';
import { assertSecretName } from '../../domain/names.js';
import { GuestFiles, StatsSource } from '../../ports/agent/guest-files.js';
import { AgentOptions } from './agent-options.js';

/** Health, readiness, stats and secret materialization: the agent's small use cases. */
@injectable()
export class AgentService {
  private readonly started = Date.now();

  constructor(
    @inject(AgentOptions) private readonly opts: AgentOptions,
    @inject(GuestFiles) private readonly files: GuestFiles,
    @inject(StatsSource) private readonly statsSource: StatsSource,
    @inject(SystemIdentity) private readonly system: SystemIdentity,
  ) {}

  /** The guest's host name (a stand-in agent's: the identity it recorded). */
  async hostname(): Promise<string> {
    const recorded = this.opts.systemIdentity ? undefined : await this.recordedIdentity();
    return recorded?.hostname ?? hostname();
  }

  async health(): Promise<AgentHealth> {
    return {
      hostname: await this.hostname(),
      agent_version: this.opts.version,
      agent_uptime_sec: Math.round((Date.now() - this.started) / 100) / 10,
      userdata_ran: await this.files.exists(join(this.opts.stateDir, 'userdata-ran')),
      readiness: await this.readiness(),
      features: [...AGENT_FEATURES],
    };
  }

  /** Where the SystemIdentity adapter notes each identity, a file per field. */
  private get identityNotes(): string {
    return join(this.opts.stateDir, 'identity');
  }

  /** The identity a stand-in agent recorded (it does not apply one to its host). */
  private async recordedIdentity(): Promise<GuestIdentity | undefined> {
    const t = await this.files.readTextDir(this.identityNotes);
    return t.hostname ? { hostname: t.hostname, time_ms: Number(t.time_ms), machine_id: t.machine_id } : undefined;
  }

  /**
   * A restored or cloned guest learns who it is: hostname, a fresh machine id, the clock. Applied
   * to the system (or, for a stand-in agent with systemIdentity off, only recorded) and noted under
   * `<state-dir>/identity/`, by the SystemIdentity adapter the agent was built with.
   */
  async setIdentity(body: unknown): Promise<void> {
    if (typeof body !== 'object' || body === null)
      throw new InvalidArgumentError('body must be {hostname, time_ms, machine_id?}');
    const b = body as Record<string, unknown>;
    if (typeof b.hostname !== 'string' || !/^[a-z0-9][a-z0-9-]{0,62}$/.test(b.hostname))
      throw new InvalidArgumentError('hostname must be a valid host name');
    if (typeof b.time_ms !== 'number' || !Number.isSafeInteger(Math.floor(b.time_ms)) || b.time_ms <= 0)
      throw new InvalidArgumentError('time_ms must be a positive number');
    const machineId = b.machine_id === undefined ? undefined : String(b.machine_id);
    if (machineId !== undefined && !/^[0-9a-f]{32}$/.test(machineId))
      throw new InvalidArgumentError('machine_id must be 32 hex digits');
    if (
      b.overlay_ip !== undefined &&
      (typeof b.overlay_ip !== 'string' || !/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/.test(b.overlay_ip))
    ) {
      throw new InvalidArgumentError('overlay_ip must be an address with prefix such as 10.77.0.5/24');
    }
    if (b.entropy !== undefined && (typeof b.entropy !== 'string' || !/^[0-9a-f]{64}$/.test(b.entropy)))
      throw new InvalidArgumentError('entropy must be 64 hex digits');
    if (b.disk_bytes !== undefined && (!Number.isSafeInteger(b.disk_bytes) || (b.disk_bytes as number) <= 0))
      throw new InvalidArgumentError('disk_bytes must be a positive integer');
    if (
      b.userdata !== undefined &&
      (typeof b.userdata !== 'string' || Buffer.byteLength(b.userdata) > USERDATA_MAX_BYTES)
    )
      throw new InvalidArgumentError(`userdata must be a string of at most ${USERDATA_MAX_BYTES} bytes`);
    await this.system.apply(
      {
        hostname: b.hostname,
        time_ms: b.time_ms,
        machine_id: machineId,
        overlay_ip: b.overlay_ip,
        entropy: b.entropy,
        disk_bytes: b.disk_bytes as number | undefined,
        userdata: b.userdata,
      },
      this.identityNotes,
    );
  }

  /**
   * The VM's egress secrets: the CA to trust (none: the one there goes) and the variables that
   * hold the placeholders, set for every process started from now on (docs/egress-secrets.md).
   */
  async setEgress(body: unknown): Promise<void> {
    if (typeof body !== 'object' || body === null || Array.isArray(body))
      throw new InvalidArgumentError('body must be {ca_pem?, env}');
    const b = body as Record<string, unknown>;
    for (const k of Object.keys(b))
      if (k !== 'ca_pem' && k !== 'env') throw new InvalidArgumentError(`unknown field "${k}"`);
    if (
      b.ca_pem !== undefined &&
      (typeof b.ca_pem !== 'string' || b.ca_pem.length > 16384 || !b.ca_pem.includes('-----BEGIN CERTIFICATE-----'))
    )
      throw new InvalidArgumentError('ca_pem must be a PEM certificate');
    const env = b.env;
    if (typeof env !== 'object' || env === null || Array.isArray(env) || Object.keys(env).length > 64)
      throw new InvalidArgumentError('env must be an object of at most 64 variables');
    for (const [k, v] of Object.entries(env))
      if (!/^[A-Za-z_][A-Za-z0-9_]{0,127}$/.test(k) || typeof v !== 'string' || v.length > 4096 || v.includes('\0'))
        throw new InvalidArgumentError(`env ${k}: a variable name and a string value of at most 4096 characters`);
    await this.system.egress(
      { ca_pem: b.ca_pem as string | undefined, env: env as Record<string, string> },
      this.opts.stateDir,
    );
  }

  /** The egress an earlier agent was given, set again (agent start). */
  resumeEgress(): Promise<void> {
    return this.system.resumeEgress(this.opts.stateDir);
  }

  /** The readiness protocol: each file in `<state-dir>/readiness/` is a key, its content the value. */
  readiness(): Promise<Readiness> {
    return this.files.readTextDir(join(this.opts.stateDir, 'readiness'));
  }

  stats(): Promise<GuestStats> {
    return this.statsSource.read();
  }

  /** Writes a secret atomically (default `<run-dir>/secrets/<name>`, mode 0600). Never logs the value. */
  async materialize(body: unknown): Promise<{ path: string; mode: string }> {
    if (typeof body !== 'object' || body === null || Array.isArray(body))
      throw new InvalidArgumentError('body must be a JSON object');
    const b = body as Partial<MaterializeRequest> & Record<string, unknown>;
    const name = assertSecretName(b.name);
    if (typeof b.data !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(b.data))
      throw new InvalidArgumentError('data must be base64 text');
    const mode = parseMode(b.mode, 0o600);
    if (Number.isNaN(mode)) throw new InvalidArgumentError('mode must be an octal string such as "0600"');
    for (const k of ['uid', 'gid'] as const) {
      if (b[k] !== undefined && (!Number.isInteger(b[k]) || (b[k] as number) < 0))
        throw new InvalidArgumentError(`${k} must be a non-negative integer`);
    }
    let path: string;
    if (b.path === undefined || b.path === '') {
      const dir = join(this.opts.runDir, 'secrets');
      await this.files.mkdir(dir, true, 0o700);
      path = join(dir, name);
    } else {
      path = absolutePath(b.path, 'path');
    }
    await this.files.writeFile(path, Readable.from([Buffer.from(b.data, 'base64')]), { mode, uid: b.uid, gid: b.gid });
    return { path, mode: formatMode(mode) };
  }
}

/** Agent paths must be absolute and free of NUL; `..` is resolved by the filesystem as usual. */
export function absolutePath(p: unknown, what = 'path'): string {
  if (typeof p !== 'string' || p === '') throw new InvalidArgumentError(`${what} is required`);
  if (!p.startsWith('/')) throw new InvalidArgumentError(`${what} must be absolute, got ${JSON.stringify(p)}`);
  if (p.includes('\0')) throw new InvalidArgumentError(`${what} must not contain NUL`);
  return p;
}
