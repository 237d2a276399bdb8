import { join } from 'node:path';
import { InternalError } from '../../../domain/errors.js';
import type { Logger } from '../../../ports/logger.js';
import type { QemuLaunch } from './qemu-args.js';
import { STATE_FD } from './qemu-spawn.js';
import { savedFiles, SUSPEND_TAG, type Saved } from './saved-state.js';

/** QEMU's words when a host port it was given is bound by someone else by the time it starts. */
const PORT_TAKEN = /hostfwd|host forwarding|Address already in use/i;
/** Starts in all (the first included) while ports keep being taken. */
const PORT_TRIES = 3;
/**
 * QEMU's words when the disk's image lock is still held. Right after this VM's previous QEMU exited
 * the kernel may not have dropped its lock yet (the last close of a killed process's file can be
 * deferred), which CI met now and then: a start or restore right after a kill or a shutdown. Its
 * pid file's lock goes the same way: "cannot create PID file: Cannot lock pid file" (CI met it on
 * a start right after a shutdown, 2026-11-29 23:21).
 */
const DISK_LOCKED = /Failed to get "(write|read)" lock|Cannot lock pid file/;
const LOCK_WAITS = 10;
export const LOCK_WAIT_MS = 200;
/**
 * A QEMU that went away without a word while loading a saved state, or at the `cont` after it: a
 * later start of the same state may load. QEMU 7.2 segfaulted this way (a null read, the same
 * address each time) when a restored guest ran before its network was attached, now and then and
 * up to five times in a row; that cause is gone (NicLinks.up, docs/forks.md), the retries stay for
 * others. They are spaced out (RESTORE_BACKOFF_MS, four at most; three deaths 150 ms apart were
 * seen) before the state is thrown away for a cold boot, which ends the guest's processes.
 */
const DIED_SILENT = /^QMP connection closed$/;
const RESTORE_BACKOFF_MS = [250, 500, 1000, 2000];

/**
 * What a launch does after a QEMU start that failed, from QEMU's own words:
 * - `again`: a port was taken between the pick and QEMU's bind, or QEMU died without a word while
 *   restoring: pick new ports and start again (after `delayMs`), still restoring (a cold boot would
 *   throw the saved state away);
 * - `wait`: the disk's lock is still going away: wait LOCK_WAIT_MS and start again, saved state
 *   kept (up to 2 s; a disk another QEMU really holds fails as before);
 * - `cold`: the saved state did not load: cold-boot the same disk;
 * - `fail`: give up with QEMU's words.
 */
export class StartRetries {
  private attempt = 1;
  private lockWaits = 0;
  private restoresAgain = 0;
  /** How long to wait before the start `after` asked for (0: at once). */
  delayMs = 0;

  /** Why this launch comes up cold instead of restoring: QEMU's words, or what `coldBoot` was told. */
  coldWhy: string | undefined;

  constructor(public restoring: boolean) {}

  /** The saved state is not to be used, before any start: `why`. */
  coldBoot(why: string): void {
    this.restoring = false;
    this.coldWhy = why;
  }

  /**
   * After a start that failed with QEMU's words `why`: logs and waits what `after` decides, so the
   * next start can go; InternalError when nothing is left to try.
   */
  async next(vm: string, why: string, log: Logger): Promise<void> {
    const next = this.after(why);
    if (next === 'fail') throw new InternalError(`qemu failed to start vm ${vm}: ${why}`);
    if (next === 'again' && this.restoring)
      log.warn({ vm, err: why, retry_in_ms: this.delayMs }, 'qemu died restoring; again');
    if (next === 'cold') {
      log.warn({ vm, err: why }, 'restore from snapshot failed; cold-booting');
      this.coldWhy = `the saved state did not load: ${why.trim().slice(0, 500)}`;
    }
    if (this.delayMs) await new Promise((r) => setTimeout(r, this.delayMs));
  }

  after(why: string): 'again' | 'wait' | 'cold' | 'fail' {
    this.delayMs = 0;
    if (this.attempt < PORT_TRIES && PORT_TAKEN.test(why)) {
      this.attempt++;
      return 'again';
    }
    if (this.lockWaits < LOCK_WAITS && DISK_LOCKED.test(why)) {
      this.lockWaits++;
      this.delayMs = LOCK_WAIT_MS;
      return 'wait';
    }
    if (this.restoring && this.restoresAgain < RESTORE_BACKOFF_MS.length && DIED_SILENT.test(why.trim())) {
      this.delayMs = RESTORE_BACKOFF_MS[this.restoresAgain++]!;
      return 'again';
    }
    if (this.restoring) {
      this.restoring = false;
      this.attempt++;
      return 'cold';
    }
    return 'fail';
  }
}

/** How a VM's saved state enters QEMU: the command line's part, and what spawnQemu opens and loads. */
export interface RestoreInputs {
  args: Pick<QemuLaunch, 'loadSnapshot' | 'incomingFd' | 'ramFile' | 'incomingDefer'>;
  /** The migration stream (or a RAM image's device state) passed as STATE_FD. */
  stateFile?: string;
  /** The stream is a RAM image's device state, loaded over QMP once QEMU is up. */
  ramImage: boolean;
}

/**
 * The restore part of a launch from `saved` in `dir` (nothing when cold-booting): an internal
 * snapshot is loaded by name, a stream from a descriptor, a RAM image mapped copy-on-write with its
 * device state loaded after QEMU starts (`-incoming defer`).
 */
export function restoreInputs(dir: string, saved: Saved | undefined): RestoreInputs {
  if (!saved) return { args: {}, ramImage: false };
  if (saved.kind === 'snapshot') return { args: { loadSnapshot: SUSPEND_TAG }, ramImage: false };
  const files = savedFiles(saved);
  const stateFile = join(dir, files.at(-1)!);
  if (saved.kind === 'stream') return { args: { incomingFd: STATE_FD }, stateFile, ramImage: false };
  return {
    args: { incomingFd: STATE_FD, ramFile: { path: join(dir, files[0]), shared: false }, incomingDefer: true },
    stateFile,
    ramImage: true,
  };
}
