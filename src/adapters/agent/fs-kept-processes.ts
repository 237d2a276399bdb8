import { spawn } from 'node:child_process';
import { constants as osConstants } from 'node:os';
import { constants, existsSync, openSync, readFileSync, watch, type FSWatcher } from 'node:fs';
import { mkdir, readdir, readFile, rm, stat } from 'node:fs/promises';
import { Socket } from 'node:net';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { InternalError, InvalidStateError, NotFoundError } from '../../domain/errors.js';
import type { ProcessStream } from '../../domain/processes.js';
import type {
  JournalReader,
  KeeperSpawn,
  KeptEnd,
  KeptProcesses,
  KeptRecord,
  KeptRun,
  StreamRange,
} from '../../ports/agent/kept-processes.js';
import { SpawnError } from '../../ports/agent/process-runner.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import { segmentsOf, SegmentReader } from './journal-reader.js';
import { etcEnvironment } from './etc-environment.js';

/** The most of an answer svc-keep gives on starting ("ok PID" or "error ..."). */
const START_ANSWER_MAX = 4096;
const SEGMENT_MAX = 1 << 20;

/**
 * Where svc-keep and svc-watch are: `dir` when given (the agent's --helpers-dir), else beside
 * the agent (the bundle's node_modules/svc-bin in a guest; dist/agent's for an agent run from
 * dist/src on a developer's host).
 */
export function findHelpers(dir?: string): string | null {
  const here = dirname(fileURLToPath(import.meta.url));
  const candidates = dir
    ? [dir]
    : [join(here, 'node_modules', 'svc-bin'), join(here, '..', '..', '..', 'agent', 'node_modules', 'svc-bin')];
  return candidates.find((c) => existsSync(join(c, 'svc-keep')) && existsSync(join(c, 'svc-watch'))) ?? null;
}

/**
 * Kept processes on the guest's disk (docs/processes.md): `<root>/<id>/` holds meta.json (the
 * KeptRecord), the journal segments svc-keep writes (`stdout.<offset>`...), its FIFOs (ctl,
 * stdin) and, once it ended, exit.json. Ids come from `<root>/.next-p` and `.next-w`, counters
 * that only grow.
 */
export class FsKeptProcesses implements KeptProcesses {
  /** Id allocations, one at a time. */
  private allocating: Promise<unknown> = Promise.resolve();
  /**
   * What never changes once written, read once: a record's meta.json, and its end. A listing or a
   * tag check then costs a directory read and a look at each running keeper, not two files each.
   */
  private readonly metas = new Map<string, KeptRecord>();
  private readonly ends = new Map<string, KeptEnd>();

  constructor(
    private readonly root: string,
    private readonly helpers: string | null,
    /** What every process starts with under its own env (the guest's /etc/environment). */
    private readonly systemEnv: () => Record<string, string> = etcEnvironment,
  ) {}

  unavailable(): string | null {
    return this.helpers
      ? null
      : 'this agent was built without svc-keep and svc-watch (a C compiler at build time; docs/processes.md)';
  }

  private dir(id: string): string {
    return join(this.root, id);
  }

  private async nextId(prefix: 'p' | 'w'): Promise<string> {
    const next = this.allocating.then(async () => {
      await mkdir(this.root, { recursive: true, mode: 0o700 });
      const file = join(this.root, `.next-${prefix}`);
      let n = Number((await readFile(file, 'utf8').catch(() => '')).trim());
      if (!Number.isSafeInteger(n) || n < 1) {
        // No counter (a first start, or lost): one past every id there is.
        const taken = (await readdir(this.root).catch(() => [] as string[]))
          .filter((x) => x.startsWith(prefix))
          .map((x) => Number(x.slice(1)))
          .filter(Number.isSafeInteger);
        n = Math.max(0, ...taken) + 1;
      }
      await writeFileAtomic(file, `${n + 1}\n`);
      return `${prefix}${n}`;
    });
    this.allocating = next.catch(() => undefined);
    return next;
  }

  async start(s: KeeperSpawn): Promise<KeptRecord> {
    if (!this.helpers) throw new InternalError(this.unavailable()!);
    const id = await this.nextId(s.kind === 'process' ? 'p' : 'w');
    const dir = this.dir(id);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const segment = Math.max(4096, Math.min(SEGMENT_MAX, Math.floor(s.capBytes / 16)));
    const opts: string[] = [];
    if (s.pty) opts.push('--pty', String(s.pty.cols), String(s.pty.rows));
    if (s.stdin) opts.push('--stdin');
    if (s.cwd) opts.push('--cwd', s.cwd);
    if (s.uid !== undefined) opts.push('--uid', String(s.uid));
    if (s.gid !== undefined) opts.push('--gid', String(s.gid));
    if (s.groups) opts.push('--groups', s.groups.join(','));
    if (s.restart) opts.push('--restart', s.restart.policy);
    if (s.restart?.max !== undefined) opts.push('--max-restarts', String(s.restart.max));
    const cmd = s.kind === 'watch' ? join(this.helpers, 'svc-watch') : s.cmd;
    const args = [dir, String(s.capBytes), String(segment), ...opts, '--', cmd, ...s.args];
    const answer = await new Promise<string>((resolve, reject) => {
      const child = spawn(join(this.helpers!, 'svc-keep'), args, {
        detached: true,
        stdio: ['ignore', 'pipe', 'ignore'],
        env: { ...process.env, ...this.systemEnv(), ...s.env },
      });
      let text = '';
      child.stdout.on('data', (d: Buffer) => {
        if (text.length < START_ANSWER_MAX) text += d.toString('utf8');
      });
      child.once('error', reject);
      child.stdout.once('close', () => resolve(text));
      child.unref();
    }).catch((err: Error) => `error ${err.message}`);
    const ok = /^ok (\d+) (\d+)\n/.exec(answer);
    if (!ok) {
      await rm(dir, { recursive: true, force: true });
      throw new SpawnError(answer.replace(/^error /, '').trim() || `cannot start ${s.cmd}`);
    }
    const rec: KeptRecord = {
      id,
      kind: s.kind,
      pid: Number(ok[1]),
      keeper_pid: Number(ok[2]),
      cmd: s.cmd,
      args: s.args,
      pty: !!s.pty,
      stdin: s.stdin,
      started_at: new Date().toISOString(),
      boot_id: bootId(),
      host: s.host,
      ...(s.tag ? { tag: s.tag } : {}),
      ...(s.watch ? { watch: s.watch } : {}),
      ...(s.restart ? { restart: s.restart } : {}),
    };
    await writeFileAtomic(join(dir, 'meta.json'), `${JSON.stringify(rec)}\n`);
    this.metas.set(id, rec);
    return rec;
  }

  async list(kind: 'process' | 'watch'): Promise<KeptRecord[]> {
    const prefix = kind === 'process' ? 'p' : 'w';
    const names = (await readdir(this.root).catch(() => [] as string[])).filter((n) =>
      new RegExp(`^${prefix}\\d+$`).test(n),
    );
    const recs = await Promise.all(names.map((n) => this.get(n)));
    return recs.filter((r): r is KeptRecord => !!r).sort((a, b) => Number(a.id.slice(1)) - Number(b.id.slice(1)));
  }

  async get(id: string): Promise<KeptRecord | null> {
    const known = this.metas.get(id);
    if (known) return known;
    try {
      const rec = JSON.parse(await readFile(join(this.dir(id), 'meta.json'), 'utf8')) as KeptRecord;
      this.metas.set(id, rec);
      return rec;
    } catch {
      return null;
    }
  }

  private async need(id: string): Promise<KeptRecord> {
    const rec = await this.get(id);
    if (!rec) throw new NotFoundError(`no process ${id}`);
    return rec;
  }

  async end(id: string): Promise<KeptEnd | null> {
    const known = this.ends.get(id);
    if (known) return known;
    const e = await this.lookForEnd(id);
    if (e) this.ends.set(id, e);
    return e;
  }

  private async lookForEnd(id: string): Promise<KeptEnd | null> {
    const rec = await this.need(id);
    const file = join(this.dir(id), 'exit.json');
    const read = async () => {
      try {
        return JSON.parse(await readFile(file, 'utf8')) as KeptEnd;
      } catch {
        return null;
      }
    };
    const e = await read();
    if (e) return e;
    if (keeperAlive(rec.keeper_pid, this.dir(id))) return null;
    const late = await read(); // it may have ended between the two looks
    if (late) return late;
    const ended: KeptEnd = { reason: rec.boot_id === bootId() ? 'lost' : 'reboot', ended_at_ms: Date.now() };
    await writeFileAtomic(file, `${JSON.stringify(ended)}\n`).catch(() => undefined);
    return ended;
  }

  async run(id: string): Promise<KeptRun | null> {
    const rec = await this.need(id);
    if (!rec.restart) return null;
    try {
      const r = JSON.parse(await readFile(join(this.dir(id), 'run.json'), 'utf8')) as Partial<KeptRun>;
      if (Number.isSafeInteger(r.pid) && Number.isSafeInteger(r.restarts))
        return { pid: r.pid as number, restarts: r.restarts as number };
    } catch {
      // not written yet (the keeper writes it right after its first start), or a half-written one of
      // a crashed guest's: the record's
    }
    return { pid: rec.pid, restarts: 0 };
  }

  async range(id: string, stream: ProcessStream): Promise<StreamRange> {
    await this.need(id);
    const segs = await segmentsOf(this.dir(id), stream);
    if (!segs.length) return { first: 0, end: 0 };
    const last = segs[segs.length - 1];
    const size = (await stat(last.path).catch(() => ({ size: 0 }))).size;
    return { first: segs[0].start, end: last.start + size };
  }

  reader(id: string, stream: ProcessStream): JournalReader {
    return new SegmentReader(this.dir(id), stream);
  }

  changed(id: string, ms: number, signal?: AbortSignal, moved?: () => Promise<boolean>): Promise<void> {
    return new Promise((resolve) => {
      let w: FSWatcher | undefined;
      const done = () => {
        clearTimeout(timer);
        w?.close();
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal?.addEventListener('abort', done, { once: true });
      if (signal?.aborted) return done();
      try {
        w = watch(this.dir(id), { persistent: false }, done);
        w.on('error', done);
      } catch {
        // gone: the caller looks again when the time is up
      }
      moved?.().then(
        (yes) => yes && done(),
        () => undefined,
      );
    });
  }

  async stdin(id: string, body: Readable): Promise<void> {
    const rec = await this.need(id);
    if (!rec.stdin) throw new InvalidStateError(`process ${id} was started without stdin: true`);
    await pipeline(body, this.fifo(id, 'stdin'));
  }

  async control(id: string, line: string): Promise<void> {
    await this.need(id);
    const s = this.fifo(id, 'ctl');
    await new Promise<void>((resolve, reject) => s.end(`${line}\n`, () => resolve()).once('error', reject));
  }

  /** A keeper's FIFO, open for writing without blocking (ENXIO: no keeper reads it any more). */
  private fifo(id: string, name: 'stdin' | 'ctl'): Socket {
    let fd: number;
    try {
      fd = openSync(join(this.dir(id), name), constants.O_WRONLY | constants.O_NONBLOCK);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENXIO' || code === 'ENOENT') throw new InvalidStateError(`process ${id} has ended`);
      throw err;
    }
    return new Socket({ fd, readable: false, writable: true });
  }

  async signal(id: string, signal: string): Promise<void> {
    const rec = await this.need(id);
    if (await this.end(id)) throw new InvalidStateError(`process ${id} has ended`);
    if (rec.restart) {
      // Through its keeper, which knows the current run (one that just ended is never signalled,
      // nor a pid reused since) and ends its restarts for a signal that means stop.
      const n = osConstants.signals[signal as NodeJS.Signals];
      if (!n) throw new InvalidStateError(`no signal ${signal} here`);
      return this.control(id, `signal ${n}`);
    }
    try {
      process.kill(-rec.pid, signal as NodeJS.Signals);
    } catch {
      try {
        process.kill(rec.pid, signal as NodeJS.Signals);
      } catch (err) {
        throw new InvalidStateError(`process ${id} cannot be signalled: ${(err as Error).message}`);
      }
    }
  }

  async remove(id: string): Promise<void> {
    const rec = await this.need(id);
    if (!(await this.end(id))) {
      // With a restart policy its keeper kills the run that is current when it reads the line (one
      // started after a kill from here would live on), and starts no next one.
      if (rec.restart) await this.control(id, `signal ${osConstants.signals.SIGKILL}`).catch(() => undefined);
      else killGroup(rec.pid);
      for (let i = 0; i < 40 && !(await this.end(id)); i++) await this.changed(id, 50);
      if (keeperAlive(rec.keeper_pid, this.dir(id))) {
        try {
          process.kill(rec.keeper_pid, 'SIGKILL');
        } catch {
          // gone
        }
        if (rec.restart) killGroup((await this.run(id))?.pid || rec.pid);
      }
    }
    await rm(this.dir(id), { recursive: true, force: true });
    this.metas.delete(id);
    this.ends.delete(id);
  }
}

/** SIGKILL to a process group, or to the process alone where it leads none; quiet when they are gone. */
function killGroup(pid: number): void {
  for (const target of [-pid, pid]) {
    try {
      process.kill(target, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

function bootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return 'unknown';
  }
}

/** Is `pid` the svc-keep of `dir`? (A recycled pid is never taken for it.) */
function keeperAlive(pid: number, dir: string): boolean {
  if (!pid) return false;
  try {
    const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return cmd[0].endsWith('svc-keep') && cmd[1] === dir && !/^\S+ \(.*\) Z/.test(stat);
  } catch {
    return false;
  }
}
