import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readdirSync } from 'node:fs';
import { setPriority } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { childEnv } from '../../process-kit/child-env.js';
import { backingName } from '../../images/qcow2-backing.js';
import type { QemuLaunch } from './qemu-args.js';
import { tail, waitForQmp } from './qemu-files.js';
import type { QmpClient } from './qmp-client.js';
import { finishIncoming } from './saved-state.js';

/** Descriptor numbers in QEMU: after stdio, the saved state, then the disk read-write and read-only. */
export const STATE_FD = 3;
const DISK_RW = 4;
const DISK_RO = 5;

/** The disk part of the command line: descriptors, and the backing file by full path. */
export async function diskFds(dir: string, disk: string): Promise<NonNullable<QemuLaunch['diskFds']>> {
  const backing = await backingName(disk);
  return { rw: DISK_RW, ro: DISK_RO, backing: backing && !isAbsolute(backing) ? join(dir, backing) : backing };
}

export interface SpawnInput {
  binary: string;
  args: string[];
  dir: string;
  disk: string;
  qmp: string;
  /** A saved migration stream to load (`args` then has `-incoming fd:3`, or `defer` with `ramImage`). */
  stateFile?: string;
  /**
   * The stream is a RAM image's device state (its memory is the file `args` maps): the load is
   * started over QMP with `x-ignore-shared`, as it was saved (`args` has `-incoming defer`).
   */
  ramImage?: boolean;
  /**
   * Lets the guest run once loaded (the default); false leaves it paused: a RAM image being made, or a
   * launch that lets it run once its network is attached (QemuHypervisor.spawn, NicLinks.up).
   */
  run?: boolean;
  /**
   * A RAM image's load is not started: QEMU waits with its devices set up and the state's
   * descriptor open until `loadHeld` (a spare QEMU, spare-qemus.ts).
   */
  hold?: boolean;
  /** Start at this nice value (a spare, which nobody waits on yet, yields the CPU to VMs that run). */
  nice?: number;
}

/**
 * Starts QEMU detached (it outlives the daemon) with its output in `qemu.log`, the disk and the
 * saved state as inherited descriptors, and waits for its monitor and, when restoring, for the
 * state to load. An Error carries the log's last lines; QEMU is gone by then.
 */
export async function spawnQemu(i: SpawnInput): Promise<{ child: ChildProcess; qmp: QmpClient } | Error> {
  const logPath = join(i.dir, 'qemu.log');
  const fds = [openSync(logPath, 'a')];
  try {
    fds.push(openSync(i.disk, 'r+'), openSync(i.disk, 'r'));
    if (i.stateFile) fds.push(openSync(i.stateFile, 'r'));
  } catch (err) {
    for (const fd of fds) closeSync(fd);
    return err as Error;
  }
  const [log, rw, ro, state] = fds;
  const child = spawn(i.binary, i.args, {
    detached: true,
    stdio: ['ignore', log, log, state ?? 'ignore', rw, ro],
    env: childEnv(),
  });
  for (const fd of fds) closeSync(fd);
  child.unref();
  if (i.nice) runInBackground(child.pid!, i.nice);
  const qmp = await waitForQmp(child, i.qmp);
  let failed = qmp instanceof Error ? qmp : undefined;
  if (!failed && i.stateFile && !(i.ramImage && i.hold))
    failed = i.ramImage
      ? await loadHeld(qmp as QmpClient, i.run)
      : await finishIncoming(qmp as QmpClient, undefined, i.run ?? true);
  if (!failed) return { child, qmp: qmp as QmpClient };
  if (!(qmp instanceof Error)) qmp.close();
  // One that never ran wrote nothing: what its log holds is of an earlier start.
  if (child.pid === undefined) return failed;
  try {
    process.kill(child.pid, 'SIGKILL');
  } catch {
    // gone already
  }
  return new Error(tail(logPath) || failed.message);
}

/**
 * Loads a RAM image's device state from the inherited descriptor into a QEMU started with
 * `-incoming defer`, and lets the guest run (unless `run` is false). An Error when it fails.
 */
export async function loadHeld(qmp: QmpClient, run = true): Promise<Error | undefined> {
  try {
    await qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: true }] });
    await qmp.execute('migrate-incoming', { uri: `fd:${STATE_FD}` });
  } catch (err) {
    return err as Error;
  }
  return finishIncoming(qmp, undefined, run);
}

/** The nice value of a VM nobody waits on yet (a warm pool member being filled). */
export const BACKGROUND_NICE = 10;

/**
 * Lowers the CPU priority of every thread of `pid` (Linux keeps a nice value per thread; threads
 * started later inherit it from the one that starts them). Best effort: a process gone or a
 * priority refused leaves it as it was.
 */
export function runInBackground(pid: number, nice = BACKGROUND_NICE): void {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return;
  }
  for (const tid of tids) {
    try {
      setPriority(Number(tid), nice);
    } catch {
      // gone meanwhile, or not ours to change
    }
  }
}
