import type { ChildProcess } from 'node:child_process';
import { InvalidStateError } from '../../../domain/errors.js';
import type { ExitListener, VmHandle, VmSpec } from '../../../ports/hypervisor.js';
import { alive } from './qemu-files.js';
import type { QmpClient } from './qmp-client.js';
import { orAfter } from '../../process-kit/or-after.js';

/** A QEMU process the daemon drives. */
export interface Live {
  /** The VM's current name (a claimed pool member is renamed while it runs). */
  name: string;
  pid: number;
  qmp: QmpClient;
  child?: ChildProcess;
  /** Set before the service stops the VM, so the exit is not reported as a crash. */
  expected: boolean;
  gone: Promise<void>;
  cid: number;
  /** What launch or reattach answered, kept current as forwards are added. */
  handle?: VmHandle;
  /** The VM's directory (its logs), kept current across renames. */
  dir: string;
  /** What it was launched with, or re-attached with (a save unplugs its shares, its RAM image has the same devices). */
  spec?: VmSpec;
}

/**
 * The QEMU processes of this daemon by VM name: each one's end is noticed (its exit when the daemon
 * is its parent, else its monitor closing and the pid gone) and reported to the exit listeners
 * unless the daemon asked for it.
 */
export class LiveVms {
  private readonly byName = new Map<string, Live>();
  private readonly listeners: ExitListener[] = [];
  private readonly gone: ((name: string) => void)[] = [];
  /** Set by release: this daemon holds no process any more, and the end of one is not its to act on. */
  private released = false;

  get(name: string): Live | undefined {
    return this.byName.get(name);
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  /** The VM's process, or the error an operation on a VM that does not run gets. */
  running(name: string): Live {
    const v = this.byName.get(name);
    if (!v) throw new InvalidStateError(`vm ${name} has no running qemu process`);
    return v;
  }

  all(): Live[] {
    return [...this.byName.values()];
  }

  onExit(listener: ExitListener): void {
    this.listeners.push(listener);
  }

  /** Every end of a process, asked for or not, heard before whoever waits for it goes on. */
  onGone(listener: (name: string) => void): void {
    this.gone.push(listener);
  }

  /** Starts watching a process; `gone` settles when it ends. */
  track(name: string, v: Omit<Live, 'gone' | 'name'>): Live {
    let resolveGone!: () => void;
    const gone = new Promise<void>((r) => (resolveGone = r));
    const entry: Live = { ...v, name, gone };
    this.byName.set(name, entry);
    let done = false;
    const finish = (reason: string) => {
      if (done) return;
      done = true;
      if (this.released) return void resolveGone();
      entry.qmp.close();
      if (this.byName.get(entry.name) === entry) this.byName.delete(entry.name);
      for (const l of this.gone) l(entry.name);
      resolveGone();
      if (!entry.expected) for (const l of this.listeners) l(entry.name, reason);
    };
    v.child?.once('exit', (code, signal) => finish(signal ? `killed by ${signal}` : `exited with status ${code}`));
    // When the daemon is not QEMU's parent (after a restart), the monitor closing is the sign.
    v.qmp.on('close', () => {
      const poll = () => (alive(v.pid) ? setTimeout(poll, 200) : finish('the qemu process is gone'));
      if (!v.child) poll();
    });
    return entry;
  }

  /** Re-keys a running VM whose directory the store moved. */
  rename(from: string, to: string, dir: string): void {
    const v = this.byName.get(from);
    if (!v) return;
    this.byName.delete(from);
    v.name = to;
    v.dir = dir;
    this.byName.set(to, v);
  }

  /** True once the process is gone, false after `ms` without that. */
  async waitGone(v: Live, ms: number): Promise<boolean> {
    return orAfter(
      v.gone.then(() => true),
      ms,
      false,
    );
  }

  /** The lowest vsock context id (3 and up) no running VM of this daemon has. */
  freeCid(): number {
    const used = new Set(this.all().map((v) => v.cid));
    let cid = 3;
    while (used.has(cid)) cid++;
    return cid;
  }

  /** Lets go of every monitor without touching the processes (they keep running). */
  release(): void {
    // A daemon stopped in a process that goes on (an embedder, the tests) still hears its former
    // children exit: were that passed on, its network driver would detach a VM a new daemon has
    // just started again under the same name.
    this.released = true;
    for (const v of this.byName.values()) {
      v.expected = true;
      v.qmp.removeAllListeners('close');
      v.qmp.close();
    }
    this.byName.clear();
  }
}
