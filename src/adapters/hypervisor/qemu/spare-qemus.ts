import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../../../ports/logger.js';
import type { VmRef, VmSpec } from '../../../ports/hypervisor.js';
import type { GuestWarmUpCalls } from '../../../ports/clone-speed-ups.js';
import { shareInto, type Frozen } from './disk-layers.js';
import { restoreInputs } from './launch-plan.js';
import { processTag } from './qemu-args.js';
import { alive, killStray, layout } from './qemu-files.js';
import type { QmpClient } from './qmp-client.js';
import { BACKGROUND_NICE, loadHeld, runInBackground, spawnQemu } from './qemu-spawn.js';
import { savedFiles } from './saved-state.js';
import type { VmCommand } from './vm-command.js';
import type { NicLinks } from './nic-links.js';
import { NO_EGRESS } from '../../guest-net/netd-guest-network.js';
import { warmSpare } from './spare-warm-up.js';
import { orAfter } from '../../process-kit/or-after.js';

/** A QEMU started ahead of a clone with its restore held: what the clone takes over. */
export interface HeldQemu {
  /** The spare's own name (its network is attached under it until a clone takes it). */
  name: string;
  pid: number;
  child: ChildProcess;
  qmp: QmpClient;
  sshPort: number;
  agentPort: number;
  /** Its process tag and disk path as its command line shows them (re-attach checks both). */
  tag: string;
  disk: string;
  /** Its NIC's socket where it was started (none: QEMU's own user-mode network). */
  net?: string;
  /** Its guest is restored already (a warmed spare, paused or still warming up): a launch only continues it. */
  loaded?: boolean;
}

interface Spare extends HeldQemu {
  key: string;
  /** Its directory, inside the template's (`templateDir`). */
  dir: string;
  templateDir: string;
  idle: NodeJS.Timeout;
  /**
   * Its warm-up (`warmWith`) has given the clone's first answer: true, and a clone may take it (what
   * is left of the warm-up goes on beside the clone); false when it failed and the spare was stopped.
   */
  answered?: Promise<boolean>;
  /** A clone took it: its warm-up, if still under way, neither pauses nor stops it. */
  taken?: boolean;
  /** Stopped on purpose (a warm-up that fails then is not worth a warning). */
  stopping?: boolean;
}

/** A spare on its way: `held` once its QEMU is up (load held), `done` once it is ready (warmed, when it is warmed). */
interface Filling {
  dir: string;
  held: Promise<void>;
  up: () => void;
  done: Promise<void>;
  /** A clone waits for it: it is not warmed (the clone takes it held rather than wait for the warm-up too). */
  wanted: boolean;
}

/** A spare's directory inside its template's. */
const SPARE_DIR = /^spare-[0-9a-f]{8}$/;
/** The directory of a spare of the template in `templateDir` (a fresh id unless given). */
export const spareDir = (templateDir: string, id = randomBytes(4).toString('hex')) => join(templateDir, `spare-${id}`);
/** Written in a spare's directory, so it moves with the files into the clone's: the disk path its QEMU names. */
const NOTE = 'spare.json';
/**
 * How long a clone waits for its template's spare when one is starting. A start takes 0.2-0.3 s on
 * an idle host; on a busy one the spare (niced) and a QEMU of the clone's own are slow alike, and
 * what is left of the spare's start is still the shorter. The bound is for a start that hangs.
 */
const FILL_WAIT_MS = 5_000;
/** A spare no clone takes is stopped after this long. */
export const SPARE_IDLE_MS = 10 * 60_000;
/**
 * How long a clone that takes a spare still warming up waits for its first answer (the spare is
 * at full priority from then on); then the clone starts its own QEMU.
 */
const TAKE_WAIT_MS = 10_000;

export interface SpareOptions {
  binary: string;
  command: VmCommand;
  log: Logger;
  /** Writes the NoCloud seed of `spec` into its directory. */
  seed: (spec: VmSpec) => Promise<void>;
  /** Its NIC's other end: attached under the spare's name, letting nothing out, until a clone takes it. */
  links: NicLinks;
  idleMs?: number;
}

/**
 * The disk path the QEMU of the VM in `dir` names when that QEMU was started as a spare (its
 * command line shows the spare's directory), else undefined.
 */
export async function spareDisk(dir: string): Promise<string | undefined> {
  const note = JSON.parse(await readFile(join(dir, NOTE), 'utf8').catch(() => 'null')) as { disk?: unknown } | null;
  return typeof note?.disk === 'string' ? note.disk : undefined;
}

/**
 * One QEMU per recently cloned template, started ahead for its next clone: its overlay and links
 * made, its devices set up, the RAM image mapped and the device state's descriptor open, the load
 * held (`-incoming defer`). With a warm-up given (`warmWith`), the spare then restores its guest,
 * runs it through the calls a clone's first answer and first command take, and pauses it. A clone
 * that matches it (same frozen layer and saved state, image, CPUs and memory) takes its files into
 * its own directory and continues the paused guest, or starts the load of a held one: no QEMU
 * start on its path (150-200 ms here), and from a warmed spare none of the first answer's code to
 * translate either (0.4-0.5 s of a held one's under TCG). Each spare lives in a directory of its
 * template's (same filesystem, so its files move by rename), is stopped after SPARE_IDLE_MS
 * unclaimed, when its template runs, is renamed or goes, and when the daemon stops; one a crashed
 * daemon left is found by `sweep`. Its ports are its own (picked when it starts); a clone's
 * forwards are added live.
 */
export class SpareQemus {
  private readonly spares = new Map<string, Spare>();
  private readonly filling = new Map<string, Filling>();
  /** Warm-ups of spares clones took, still going on beside them (waited for by `settled`). */
  private readonly tails = new Set<Promise<void>>();
  /** Clones whose files came with a spare, by name: their launch takes it over. */
  private readonly held = new Map<string, HeldQemu>();
  /** Clones that start their template's next spare once they are up. */
  private readonly refills = new Map<string, () => void>();

  /** What a spare's restored guest runs before it waits (`warmWith`); without it spares wait held. */
  private warm: GuestWarmUpCalls | undefined;

  constructor(private readonly o: SpareOptions) {}

  /**
   * Spares from now on load their guest, run it through `warm` (the calls a clone's first answer
   * and first command take, under the spare's own name) and pause it: a clone that takes one then
   * finds QEMU's translated code and the guest's caches warm, and only continues it.
   */
  warmWith(warm: GuestWarmUpCalls | undefined): void {
    this.warm = warm;
  }

  /**
   * Gives the clone `spec` of `template` (frozen as `top`) the files of the template's spare when
   * one matches: true, and its launch takes the spare over (`start`). False: the caller makes the
   * clone's files. Either way the template's next spare starts once the clone is up (`ready`).
   */
  async claim(template: VmRef, top: Frozen, spec: VmSpec): Promise<boolean> {
    this.refills.set(spec.name, () => this.refill(template, top, spec));
    // One on its way is waited for a while: what is left of its start is less than a start of our
    // own. It is not warmed then: its warm-up and the clone's first answer would be the same work twice.
    const filling = this.filling.get(template.name);
    if (filling) {
      filling.wanted = true;
      await orAfter(filling.held, FILL_WAIT_MS, undefined);
    }
    const q = await this.take(template, top, spec);
    if (q) this.held.set(spec.name, q);
    return q !== undefined;
  }

  /**
   * The spare clone `name` holds, its saved state loaded and the guest running (paused when not
   * `run`); undefined when it holds none, or (the spare stopped, the clone's files left for a QEMU
   * of its own) when it is not to restore or the load fails.
   */
  async start(name: string, restore: boolean, run = true): Promise<HeldQemu | undefined> {
    const q = this.held.get(name);
    this.held.delete(name);
    if (!q) return undefined;
    // Its guest is one people wait on now (a daemon that is not root cannot raise it back: it stays nice).
    runInBackground(q.pid, 0);
    let failed: Error | undefined;
    if (!restore) failed = new Error('asked to cold-boot');
    else if (!q.loaded) failed = await loadHeld(q.qmp, run);
    else if (run)
      failed = await q.qmp.execute('cont').then(
        () => undefined,
        (err: Error) => err,
      );
    if (!failed) return q;
    this.o.log.warn({ vm: name, err: failed.message }, 'the spare qemu did not restore the clone; starting another');
    await this.kill(q);
    return undefined;
  }

  /** Clone `name` is up and answered: its template's next spare starts. */
  ready(name: string): void {
    const refill = this.refills.get(name);
    this.refills.delete(name);
    refill?.();
  }

  /** Clone `name` goes without a launch: what it held is let go (its QEMU is found by its pidfile). */
  forget(name: string): void {
    this.held.get(name)?.qmp.close();
    this.held.delete(name);
    this.refills.delete(name);
  }

  /** What a spare must match: the frozen layer and saved state it restores, and the machine. */
  static key(top: Frozen, spec: VmSpec): string {
    return [top.layer, ...savedFiles(top.state), spec.image, spec.cpus, spec.memory_mb].join(' ');
  }

  /**
   * Takes the spare of `template` for the clone `spec` when it matches: every file but its seed
   * moves into `spec.dir` (the seed is the caller's to write). Undefined when there is none; one
   * that does not match (the template changed since) is stopped.
   */
  private async take(template: VmRef, top: Frozen, spec: VmSpec): Promise<HeldQemu | undefined> {
    const s = this.spares.get(template.name);
    if (!s) return undefined;
    this.spares.delete(template.name);
    clearTimeout(s.idle);
    // A warm-up under way is waited for until it has given the first answer (which the clone's own
    // would race, and which it makes a fraction as long); what is left of it goes on beside the clone.
    const fits = s.key === SpareQemus.key(top, spec) && s.templateDir === template.dir;
    if (fits && s.answered) runInBackground(s.pid, 0); // a clone waits on it now
    const answered = () => orAfter(s.answered!, TAKE_WAIT_MS, false);
    if (!fits || (s.answered && !(await answered())) || !alive(s.pid)) {
      await this.stop(s);
      return undefined;
    }
    s.taken = true;
    // Its warm-up may go on a moment; the template's next spare need not wait for it.
    const f = this.filling.get(template.name);
    if (f?.dir === s.dir) {
      this.filling.delete(template.name);
      this.tails.add(f.done);
      void f.done.then(() => this.tails.delete(f.done));
    }
    try {
      for (const f of await readdir(s.dir)) if (f !== 'seed.iso') await rename(join(s.dir, f), join(spec.dir, f));
      await rm(s.dir, { recursive: true, force: true });
    } catch (err) {
      await this.stop(s);
      throw err;
    }
    return s;
  }

  /** Starts a spare for the next clone of `template` (like `spec`) unless one is there or on its way. */
  private refill(template: VmRef, top: Frozen, spec: VmSpec): void {
    if (this.spares.has(template.name) || this.filling.has(template.name)) return;
    let up!: () => void;
    const held = new Promise<void>((r) => (up = r));
    const f: Filling = { dir: spareDir(template.dir), held, up, done: Promise.resolve(), wanted: false };
    f.done = this.fill(template, f, top, spec)
      .catch((err: unknown) =>
        this.o.log.warn(
          { vm: template.name, err: (err as Error).message },
          'cannot start a spare qemu; the next clone starts its own',
        ),
      )
      .finally(() => {
        f.up(); // one that never came up lets a clone waiting for it go on
        if (this.filling.get(template.name) === f) this.filling.delete(template.name);
      });
    this.filling.set(template.name, f);
  }

  private async fill(template: VmRef, f: Filling, top: Frozen, like: VmSpec): Promise<void> {
    const dir = f.dir;
    const name = dir.slice(dir.lastIndexOf('/') + 1);
    const spec: VmSpec = { ...like, name, hostname: name, dir, forwards: [] };
    const l = layout(dir);
    await mkdir(dir);
    let s: Spare;
    try {
      await shareInto(template.dir, dir, top);
      await this.o.seed(spec);
      await writeFile(join(dir, NOTE), JSON.stringify({ disk: l.disk }));
      const nic = await this.o.command.nic(spec, l);
      const restore = restoreInputs(dir, top.state);
      const args = await this.o.command.args(spec, { nic, ...restore.args });
      const started = await spawnQemu({
        binary: this.o.binary,
        args,
        dir,
        disk: l.disk,
        qmp: l.qmp,
        stateFile: restore.stateFile,
        ramImage: true,
        hold: true,
        nice: BACKGROUND_NICE,
      });
      if (started instanceof Error) throw started;
      const { child, qmp } = started;
      let ports;
      try {
        ports = await this.o.links.up({ name, dir }, nic, [], NO_EGRESS, { pid: child.pid!, qmp });
      } catch (err) {
        child.kill('SIGKILL');
        qmp.close();
        throw err;
      }
      const idle = setTimeout(() => void this.drop(template.name), this.o.idleMs ?? SPARE_IDLE_MS).unref();
      s = {
        name,
        pid: child.pid!,
        child,
        qmp,
        sshPort: ports.ssh_port,
        agentPort: ports.agent_port,
        tag: processTag(name),
        disk: l.disk,
        net: nic.kind === 'netd' ? nic.socket : undefined,
        key: SpareQemus.key(top, spec),
        dir,
        templateDir: template.dir,
        idle,
      };
      const spare = s;
      child.once('exit', () => {
        if (this.spares.get(template.name) !== spare) return;
        this.spares.delete(template.name);
        clearTimeout(idle);
        qmp.close();
        void rm(dir, { recursive: true, force: true }).catch(() => undefined); // what stays is swept at the next start
      });
    } catch (err) {
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
    this.spares.set(template.name, s);
    const warming = this.warm && !f.wanted ? this.warmUp(template.name, s, this.warm) : undefined;
    f.up();
    this.o.log.info(
      { vm: template.name, pid: s.pid },
      warming ? 'spare qemu up; warming it for the next clone' : 'spare qemu ready for the next clone',
    );
    await warming;
  }

  /**
   * Warms the spare up (`warmSpare`, spare-warm-up.ts). A step that fails or outlasts its bound
   * before a clone took it stops the spare, and the next clone starts its own QEMU.
   */
  private async warmUp(template: string, s: Spare, warm: GuestWarmUpCalls): Promise<void> {
    const t0 = Date.now();
    const err = await warmSpare(s, warm);
    if (err) {
      if (!s.stopping) this.o.log.warn({ vm: template, err: err.message }, 'a spare qemu did not warm up; stopped');
      if (this.spares.get(template) === s) {
        this.spares.delete(template);
        clearTimeout(s.idle);
      }
      await this.stop(s);
      return;
    }
    this.o.log.info(
      { vm: template, pid: s.pid, warm_ms: Date.now() - t0 },
      s.taken ? 'spare qemu taken by a clone during its warm-up' : 'spare qemu warmed and paused for the next clone',
    );
  }

  /**
   * Stops the spare of `template` (and one on its way), if any, and with `dir` (the template's
   * directory as it is now) any other spare found there.
   */
  async drop(template: string, dir?: string): Promise<void> {
    // Once up it is in `spares`: stopped there, not waited for (its warm-up then fails and ends).
    await this.filling.get(template)?.held;
    const s = this.spares.get(template);
    if (s) {
      this.spares.delete(template);
      clearTimeout(s.idle);
      await this.stop(s);
    }
    if (dir) await this.sweep(dir);
  }

  /**
   * Stops spares in the VM directory `dir` that this daemon does not hold (a crashed one's): found
   * by their pidfiles, checked by their command lines.
   */
  async sweep(dir: string): Promise<void> {
    const mine = new Set([...this.spares.values(), ...this.filling.values()].map((s) => s.dir));
    for (const e of await readdir(dir).catch(() => [] as string[])) {
      const sub = join(dir, e);
      if (!SPARE_DIR.test(e) || mine.has(sub)) continue;
      await killStray(sub, (pid) => this.o.log.warn({ dir: sub, pid }, 'stopping a spare qemu a crashed daemon left'));
      await rm(sub, { recursive: true, force: true });
    }
  }

  /** Every spare stopped (the daemon stops: a spare is not a VM and must not outlive it). */
  async stopAll(): Promise<void> {
    const filling = [...this.filling.values()];
    await Promise.all(filling.map((f) => f.held));
    await Promise.all([...this.spares.keys()].map((t) => this.drop(t)));
    await Promise.all(filling.map((f) => f.done));
  }

  /** Resolves once no spare is on its way and no warm-up goes on (tests, benchmarks). */
  async settled(): Promise<void> {
    await Promise.all([...this.filling.values()].map((f) => f.done));
    await Promise.all([...this.tails]);
  }

  private async stop(s: Spare): Promise<void> {
    s.stopping = true;
    await this.kill(s);
    await rm(s.dir, { recursive: true, force: true });
  }

  private async kill(q: HeldQemu): Promise<void> {
    q.qmp.close();
    await this.o.links.down(q.name);
    const gone = new Promise<void>((r) =>
      q.child.exitCode !== null || q.child.signalCode !== null ? r() : q.child.once('exit', () => r()),
    );
    try {
      process.kill(q.pid, 'SIGKILL');
    } catch {
      // gone already
    }
    await gone;
  }
}
