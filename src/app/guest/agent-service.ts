import { hostname } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { inject, injectable } from 'inversify';
import type { AgentHealth, GuestStats, MaterializeRequest, Readiness } from '../../domain/agent.js';
import { formatMode, parseMode } from '../../domain/agent.js';
import { InvalidArgumentError } from '../../domain/errors.js';
import { assertSecretName } from '../../domain/names.js';
import { GuestFiles, StatsSource } from '../../ports/guest/guest-files.js';
import { AgentOptions } from './agent-options.js';

/** Health, readiness, stats and secret materialization: the agent's small use cases. */
@injectable()
export class AgentService {
  private readonly started = Date.now();

  constructor(
    @inject(AgentOptions) private readonly opts: AgentOptions,
    @inject(GuestFiles) private readonly files: GuestFiles,
    @inject(StatsSource) private readonly statsSource: StatsSource,
  ) {}

  async health(): Promise<AgentHealth> {
    return {
      hostname: hostname(),
      agent_version: this.opts.version,
      agent_uptime_sec: Math.round((Date.now() - this.started) / 100) / 10,
      userdata_ran: await this.files.exists(join(this.opts.stateDir, 'userdata-ran')),
      readiness: await this.readiness(),
    };
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
    if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new InvalidArgumentError('body must be a JSON object');
    const b = body as Partial<MaterializeRequest> & Record<string, unknown>;
    const name = assertSecretName(b.name);
    if (typeof b.data !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(b.data)) throw new InvalidArgumentError('data must be base64 text');
    const mode = parseMode(b.mode, 0o600);
    if (Number.isNaN(mode)) throw new InvalidArgumentError('mode must be an octal string such as "0600"');
    for (const k of ['uid', 'gid'] as const) {
      if (b[k] !== undefined && (!Number.isInteger(b[k]) || (b[k] as number) < 0)) throw new InvalidArgumentError(`${k} must be a non-negative integer`);
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
