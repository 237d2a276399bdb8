import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, open, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { InvalidArgumentError, errorMessage } from '../../domain/errors.js';
import type { ProcessInfo } from '../../domain/processes.js';
import { SvcError, type SvcClient } from '../client/svc-client.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import { E2B_HOME, guestUser } from './sandboxes.js';
import { copyArchive } from './template-copy.js';

/**
 * One of E2B's template builds (`Template.build` in the SDK, docs/e2b.md) on svc: a build boots a VM of
 * its base, runs its steps through the daemon's own API (RUN as a durable process, COPY as a tar
 * into the guest, ENV, WORKDIR, USER), starts its start command and waits for its ready command,
 * then suspends the VM. That suspended VM is the template: a sandbox created from it is a clone,
 * with the start command's process still running in it. A template's name and id are in the VM's
 * tags, its environment and working folder in `<dir>/templates/<vm>.json`, so a daemon restart
 * keeps templates; a build under way when the daemon stops is lost (its VM is removed when the daemon
 * starts again, TemplateBuilds.sweep, and the build says it failed: BuildRecords).
 */
export const TPL = {
  id: 'e2b/tpl_id',
  name: 'e2b/tpl_name',
  build: 'e2b/tpl_build',
  /** The hash of what the build was made from: the build cache (templates.ts). */
  key: 'e2b/tpl_key',
} as const;

export type BuildStatus = 'waiting' | 'building' | 'ready' | 'error';
export interface BuildLog {
  timestamp: string;
  level: 'debug' | 'info' | 'warn' | 'error';
  message: string;
  step?: string;
}
export interface Build {
  templateID: string;
  buildID: string;
  name: string;
  /** The tags that name this build once it is ready (template-tags.ts). */
  tags: string[];
  /** What it is made from, hashed (templates.ts). */
  key?: string;
  cpus?: number;
  memoryMb?: number;
  status: BuildStatus;
  logs: BuildLog[];
  reason?: { message: string; step?: string };
  /** Lines of output past the log's bound, not kept. */
  cut?: number;
}
export interface TemplateStep {
  type: string;
  args?: string[];
  filesHash?: string;
  /** This step and the ones after it are not taken from the cache (the SDK's `skipCache`). */
  force?: boolean;
}
export interface BuildSpec {
  fromImage?: string;
  fromTemplate?: string;
  fromImageRegistry?: unknown;
  steps?: TemplateStep[];
  startCmd?: string;
  readyCmd?: string;
  /** Build it again even when a kept build was made the same way (`skipCache`). */
  force?: boolean;
}

export interface TemplateDefaults {
  envs: Record<string, string>;
  workdir?: string;
}

/** What a build starts from: svc's create fields, and a template's defaults when it is one. */
export interface RunBase {
  create: Record<string, unknown>;
  defaults?: TemplateDefaults;
  /** A registry image svc does not have yet: pulled as `image` (its POST /images body) before the boot. */
  pull?: { name: string; from: string; registry_auth?: { username: string; password: string } };
  /** Said in the build's log first: what a registry's tag is now, or that the registry did not say. */
  note?: { message: string; warn?: boolean };
}

/** What a build's shell line runs with: the environment, folder and user the steps so far set. */
interface Shell {
  env: Record<string, string>;
  workdir?: string;
  user?: string;
}

/** How long a ready command is retried before the build fails. */
const READY_TIMEOUT_MS = 120_000;

/** Where a build finds its uploads and keeps a template's defaults; what makes a suspended build the template. */
export interface RunPlaces {
  file(hash: string): string;
  record(vm: string): string;
  /** Its tags name it now; the template's builds no tag names go (template-tags.ts). */
  settle(b: Build, log: (message: string, level?: 'info' | 'warn') => void): Promise<void>;
}

/** Runs a build's steps in a VM of its base through the daemon's own API (templates.ts starts it). */
export class TemplateRun {
  constructor(
    private readonly client: SvcClient,
    private readonly o: RunPlaces,
  ) {}

  /** The pulls going on, by image name: a second build of the same new image waits for the first's. */
  private readonly pulls = new Map<string, Promise<void>>();

  /**
   * Pulls a build's base from its registry as an svc image, each line of its progress in the build's
   * log. A build whose image another build is pulling waits for that pull, and fails with it.
   */
  private pull(req: NonNullable<RunBase['pull']>, log: (m: string) => void): Promise<void> {
    const going = this.pulls.get(req.name);
    if (going) {
      log(`waiting for another build's pull of ${req.from} as image ${req.name}`);
      return going;
    }
    const pull = this.pullOnce(req, log).finally(() => this.pulls.delete(req.name));
    this.pulls.set(req.name, pull);
    return pull;
  }

  /** One pulled meanwhile (since the build looked, or by someone else: a 409) is taken as it is. */
  private async pullOnce(req: NonNullable<RunBase['pull']>, log: (m: string) => void): Promise<void> {
    if (
      await this.client.getImage(req.name).then(
        () => true,
        () => false,
      )
    )
      return log(`image ${req.name} was pulled meanwhile`);
    log(`pulling ${req.from} as image ${req.name}`);
    try {
      for await (const e of this.client.buildImageStream(req)) {
        if (e.phase === 'error') throw new Error(`pulling ${req.from}: ${e.error ?? e.message}`);
        if (e.phase === 'import' || e.phase === 'ready') log(e.message);
      }
    } catch (err) {
      if (!(err instanceof SvcError && err.status === 409)) throw err;
      log(`image ${req.name} is being pulled or is there already`);
      await this.client.getImage(req.name);
    }
  }

  async run(b: Build, base: RunBase, steps: TemplateStep[], spec: BuildSpec): Promise<void> {
    const vm = `e2b-tpl-${randomBytes(6).toString('hex')}`;
    const log = (message: string, step?: string, level: BuildLog['level'] = 'info') => logTo(b, message, step, level);
    const env: Record<string, string> = { ...base.defaults?.envs };
    let workdir = base.defaults?.workdir;
    let user: string | undefined;
    let step = 'base';
    try {
      if (base.note) log(base.note.message, step, base.note.warn ? 'warn' : 'info');
      if (base.pull) await this.pull(base.pull, (m) => log(m, step));
      log(`booting ${vm} from ${JSON.stringify(base.create)}`, step);
      await this.client.create(
        {
          name: vm,
          persistent: true,
          ...base.create,
          ...(b.cpus ? { cpus: b.cpus } : {}),
          ...(b.memoryMb ? { memory_mb: b.memoryMb } : {}),
          tags: {
            [TPL.id]: b.templateID,
            [TPL.name]: b.name,
            [TPL.build]: b.buildID,
            ...(b.key ? { [TPL.key]: b.key } : {}),
          },
        } as never,
        { wait: 'agent' },
      );
      for (const [i, s] of steps.entries()) {
        step = String(i + 1);
        const args = s.args ?? [];
        log(`${s.type} ${args.filter(Boolean).join(' ')}`.slice(0, 500), step);
        if (s.type === 'ENV') for (let j = 0; j + 1 < args.length; j += 2) env[args[j]] = args[j + 1];
        else if (s.type === 'WORKDIR') {
          workdir = args[0];
          await this.sh(vm, b, step, `mkdir -p '${workdir.replace(/'/g, `'\\''`)}'`, { env, user: undefined });
        } else if (s.type === 'USER') user = guestUser(args[0]);
        else if (s.type === 'RUN')
          await this.sh(vm, b, step, args[0] ?? '', { env, workdir, user: guestUser(args[1]) ?? user });
        else if (s.type === 'COPY') await this.copy(vm, s, guestUser(args[2]) ?? user, workdir);
      }
      step = 'finalize';
      if (spec.startCmd) {
        log(`start: ${spec.startCmd}`, step);
        await this.begin(vm, spec.startCmd, { env, workdir, user }, 'e2b-start');
      }
      if (spec.readyCmd) await this.ready(vm, spec.readyCmd, { env, workdir, user }, log);
      const defaults: TemplateDefaults = { envs: env, workdir };
      await mkdir(dirname(this.o.record(vm)), { recursive: true, mode: 0o700 });
      await writeFileAtomic(this.o.record(vm), `${JSON.stringify(defaults)}\n`);
      log(`suspending ${vm}: it is the template`, step);
      await this.client.suspend(vm);
      await this.o.settle(b, (m, level) => log(m, step, level));
      b.status = 'ready';
      log(`template ${b.name} (${b.templateID}) is ready`, step);
    } catch (err) {
      const message = errorMessage(err);
      log(message, step, 'error');
      b.reason = { message, step };
      // gone before the build says it failed: a client that sees the error finds nothing left
      await this.client.delete(vm).catch(() => undefined);
      await rm(this.o.record(vm), { force: true }).catch(() => undefined);
      b.status = 'error';
    }
  }

  /** A shell line in the build VM as a durable process (tagged: one that outlives the build). */
  private begin(vm: string, line: string, o: Shell, tag?: string): Promise<ProcessInfo> {
    return this.client.startProcess(vm, {
      cmd: '/bin/sh',
      args: ['-c', line],
      env: o.env,
      cwd: o.workdir,
      user: o.user,
      ...(tag ? { tag } : {}),
    });
  }

  /** A shell line run to its end, its output to `onText`; the step's process record goes after. */
  private async shell(vm: string, line: string, o: Shell, onText: (t: string) => void = () => undefined) {
    const p = await this.begin(vm, line, o);
    let end: { exit_code?: number; signal?: string } = {};
    for await (const f of this.client.processOutput(vm, p.id)) {
      if ('stream' in f) onText(f.encoding === 'base64' ? Buffer.from(f.data, 'base64').toString('utf8') : f.data);
      else if ('reason' in f) end = f;
    }
    await this.client.removeProcess(vm, p.id).catch(() => undefined);
    return end;
  }

  /** A step's shell line: its output in the build's log line by line; a failure ends the build. */
  private async sh(vm: string, b: Build, step: string, line: string, o: Shell): Promise<void> {
    let partial = '';
    const end = await this.shell(vm, line, o, (text) => {
      const lines = (partial + text).split('\n');
      partial = lines.pop() ?? '';
      for (const l of lines) logTo(b, l, step, 'info', true);
    });
    if (partial) logTo(b, partial, step, 'info', true);
    if (end.exit_code !== 0)
      throw new InvalidArgumentError(
        `step ${step} failed: ${JSON.stringify(line.slice(0, 200))} ${end.signal ? `was killed by ${end.signal}` : `exited with ${end.exit_code}`}`,
      );
  }

  /** A COPY: the uploaded archive, its paths where COPY puts them (template-copy.ts), as a tar into the guest's `/`. */
  private async copy(
    vm: string,
    s: TemplateStep,
    user: string | undefined,
    workdir: string | undefined,
  ): Promise<void> {
    const [src, dest, , mode] = s.args ?? [];
    const file = this.o.file(s.filesHash!);
    const head = Buffer.alloc(2);
    const fh = await open(file, 'r').catch(() => {
      throw new InvalidArgumentError(`the files of COPY ${src} were not uploaded`);
    });
    try {
      await fh.read(head, 0, 2, 0);
    } finally {
      await fh.close();
    }
    let uid = 0;
    let gid = 0;
    if (user) {
      const ids = await this.client.exec(vm, { cmd: '/bin/sh', args: ['-c', 'id -u "$1" && id -g "$1"', 'sh', user] });
      const [u, g] = ids.stdout.trim().split('\n').map(Number);
      if (ids.exit_code !== 0 || !Number.isInteger(u) || !Number.isInteger(g))
        throw new InvalidArgumentError(`COPY: the guest has no user ${user}`);
      uid = u;
      gid = g;
    }
    const gz = head[0] === 0x1f && head[1] === 0x8b;
    const tar = copyArchive(createReadStream(file), gz, {
      src,
      // relative to the WORKDIR, as Docker's COPY; else to E2B's user's home, which is root's here
      dest: dest.startsWith('/') ? dest : `${workdir ?? E2B_HOME}/${dest}`,
      uid,
      gid,
      mode: mode ? parseInt(mode, 8) : undefined,
    });
    await this.client.upload(vm, { path: '/', mode: 'tar' }, tar);
  }

  private async ready(vm: string, cmd: string, o: Shell, log: (m: string, step?: string) => void): Promise<void> {
    const until = Date.now() + READY_TIMEOUT_MS;
    log(`waiting for: ${cmd}`, 'finalize');
    while ((await this.shell(vm, cmd, o)).exit_code !== 0) {
      if (Date.now() > until)
        throw new InvalidArgumentError(`the ready command did not succeed in ${READY_TIMEOUT_MS / 1000} s: ${cmd}`);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

/** The most lines of output a build's log keeps; what comes after is counted in one last line. */
const MAX_LOG_LINES = 20_000;

/** A line of a build's log. Steps' output stops at MAX_LOG_LINES; svc's own lines always go in. */
export function logTo(
  b: Build,
  message: string,
  step: string | undefined,
  level: BuildLog['level'],
  output = false,
): void {
  if (output && b.logs.length >= MAX_LOG_LINES) {
    b.cut = (b.cut ?? 0) + 1;
    return;
  }
  if (!output && b.cut) {
    b.logs.push({ timestamp: new Date().toISOString(), level: 'warn', message: `(${b.cut} lines of output not kept)` });
    b.cut = 0;
  }
  b.logs.push({
    timestamp: new Date().toISOString(),
    level,
    message: message.slice(0, 4096),
    ...(step ? { step } : {}),
  });
}
