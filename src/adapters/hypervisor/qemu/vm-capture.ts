import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, link, open, readdir, readFile, rename, rm } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NotSupportedError } from '../../../domain/errors.js';
import { promisify } from 'node:util';
import { childEnv } from '../../process-kit/child-env.js';
import { virtualSize } from '../../images/overlay.js';
import type { Frozen } from './disk-layers.js';
import { UNLOCKED } from './qemu-args.js';
import type { QmpClient, QmpEvent } from './qmp-client.js';
import { processOwner, saveStream } from './saved-state.js';

const run = promisify(execFile);
const DISK = 'disk.qcow2';
/** native/svc-fdpass.c, built beside the daemon (scripts/build-native.mjs). */
const FDPASS = fileURLToPath(new URL('../../../../native/svc-fdpass', import.meta.url));

/**
 * A capture of a running VM, for its forks: `<id>.qcow2`, its disk as it was (a frozen layer
 * it now stands on, like a template's), and `<id>.state`, its memory and devices as a migration
 * stream. The id has a layer's form, so the files are shared, linked and removed as a
 * template's are (disk-layers.ts).
 */
export const captureTop = (id: string): Frozen => ({
  layer: `${id}.qcow2`,
  state: { kind: 'stream', file: `${id}.state` },
});

const CAPTURE_ID = /^base-[0-9a-f]{16}$/;
export const isCaptureId = (id: string) => CAPTURE_ID.test(id);

/**
 * Gives QEMU the file as a new fd set, read-write and read-only (what it opens `/dev/fdset/N` with
 * depends on the use, as for the first disk: qemu-args.ts); resolves with the set's id.
 */
async function handOver(qmp: QmpClient, file: string, helper: string): Promise<number> {
  const sets = await qmp.execute<{ 'fdset-id': number }[]>('query-fdsets');
  const id = Math.max(1, ...sets.map((s) => s['fdset-id'])) + 1;
  for (const mode of ['r+', 'r'] as const) {
    const fh = await open(file, mode);
    try {
      await qmp.executeWithFd('add-fd', { 'fdset-id': id, opaque: basename(file) }, fh.fd, helper);
    } finally {
      await fh.close();
    }
  }
  return id;
}

/** The drive that carries the VM's disk (a qcow2 image; the seed is raw). */
async function diskDevice(qmp: QmpClient): Promise<string> {
  const blocks = await qmp.execute<{ device: string; inserted?: { drv?: string } }[]>('query-block');
  const found = blocks.find((b) => b.inserted?.drv === 'qcow2');
  if (!found) throw new Error('the vm has no qcow2 disk to capture');
  return found.device;
}

/**
 * Captures the VM whose monitor is `qmp` and whose files are in `dir` (capture's contract in the
 * VmDisks port):
 * 1. while the guest runs, the disk gets a second name, `<id>.qcow2`, and a new empty overlay
 *    standing on it is handed to QEMU as descriptors (it runs as another user and could not open
 *    it: handOver) and put in place as `disk.qcow2`; QEMU still writes the old file, which the
 *    overlay shows through, so a daemon that dies here leaves a VM whose disk reads the same;
 * 2. the memory is sent to `<id>.state` as a migration stream while the guest runs on; QEMU stops
 *    the guest for the last of it and waits (`pause-before-switchover`). Only under KVM: under
 *    TCG the guest is stopped before the stream starts (see `liveCapture`);
 * 3. in that pause, `blockdev-add` and `blockdev-snapshot` make QEMU write to the overlay from now
 *    on and reopen `<id>.qcow2` read-only: the layer is frozen at the instant the memory is;
 * 4. the device state follows, which leaves the disk deactivated; once the whole stream is in the
 *    file, `cont` runs the guest on (and reactivates the disk), and only then is the file synced.
 *    A VM that was paused is stopped again at once, since QEMU reactivates a migrated VM's disks
 *    only by running it.
 * The guest is held from step 2's stop to step 4's `cont` (`paused_ms`, by QEMU's own events);
 * under TCG from the start of step 2.
 * A failure before step 3 puts the old disk back; after it, the layer stays (the VM stands on it)
 * and the stream goes. Either way the guest runs on as it was. `switching` is called as step 3
 * begins (a test's failpoint: a daemon that dies with the guest stopped).
 */
export async function captureVm(
  qmp: QmpClient,
  dir: string,
  pid: number,
  o: { helper?: string; switching?: () => void } = {},
): Promise<{ id: string; paused_ms: number; live: boolean }> {
  const helper = o.helper ?? FDPASS;
  if (!existsSync(helper))
    throw new NotSupportedError(
      `forks of a running vm need the svc-fdpass helper, which is not built (${helper}): install a C compiler and run npm run build`,
    );
  const id = `base-${randomBytes(8).toString('hex')}`;
  const top = captureTop(id);
  const disk = join(dir, DISK);
  const layer = join(dir, top.layer);
  const fresh = join(dir, `${DISK}.new`);
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
  if (!cmdline.includes(UNLOCKED))
    throw new NotSupportedError(
      'this vm was started by an older svcd, whose QEMU cannot run on after a capture: stop and start it (or suspend and restore it) to fork it',
    );
  const owner = await processOwner(pid);
  const device = await diskDevice(qmp);
  const status = await qmp.execute<{ running: boolean; status: string }>('query-status');
  const wasRunning = status.running;
  const live = wasRunning && (await liveCapture(qmp));
  const held = holdTimer(qmp);
  let switched = false;
  let resumed = false;
  let fdset: number | undefined;
  // Made while the guest runs: the layer's second name and the overlay standing on it. QEMU still
  // writes the old file, which the overlay only shows through, so any instant is consistent.
  const undo = async () => {
    if (fdset !== undefined) await qmp.execute('remove-fd', { 'fdset-id': fdset }).catch(() => undefined);
    await rm(fresh, { force: true });
    // The old file under its own name again (it is still the one QEMU writes).
    await rename(layer, disk).catch(() => undefined);
  };
  try {
    await link(disk, layer);
    try {
      await run(
        'qemu-img',
        ['create', '-q', '-u', '-f', 'qcow2', '-b', top.layer, '-F', 'qcow2', fresh, String(await virtualSize(layer))],
        { env: childEnv() },
      );
      fdset = await handOver(qmp, fresh, helper).catch((e: Error) => {
        throw new Error(`handing the new layer over: ${e.message}`);
      });
      await rename(fresh, disk);
    } catch (err) {
      await undo();
      throw err;
    }
    // The memory is sent while the guest runs (under KVM; under TCG it is stopped just before the
    // stream starts); QEMU stops it for the last of it and waits (pause-before-switchover): then the
    // disk switches, so memory and disk are of one instant. The guest runs on as soon as the whole
    // stream is in the file, before the file is synced.
    await saveStream(qmp, dir, {
      owner,
      file: `${id}.state`,
      stopFirst: wasRunning && !live,
      preSwitchover: async () => {
        o.switching?.();
        try {
          // Unlocked as the first disk is (qemu-args.ts), or `cont` could not take the disk back.
          await qmp.execute('blockdev-add', {
            driver: 'qcow2',
            'node-name': `cap-${id.slice(5)}`,
            discard: 'unmap',
            file: { driver: 'file', filename: `/dev/fdset/${fdset}`, locking: 'off' },
            backing: null,
          });
          await qmp.execute('blockdev-snapshot', { node: device, overlay: `cap-${id.slice(5)}` });
        } catch (err) {
          await qmp.execute('blockdev-del', { 'node-name': `cap-${id.slice(5)}` }).catch(() => undefined);
          await undo();
          throw err;
        }
        switched = true;
      },
      streamed: async () => {
        await resume(qmp, wasRunning);
        resumed = true;
      },
    });
    await chmod(layer, 0o444);
    const fh = await open(join(dir, `${id}.state`), 'r');
    await fh.close();
  } catch (err) {
    await rm(join(dir, `${id}.state`), { force: true });
    if (!resumed) await resume(qmp, wasRunning);
    held.stop();
    throw new Error(
      `cannot capture the vm${switched ? ' (its disk stands on a new layer)' : ''}: ${(err as Error).message}`,
    );
  }
  return { id, paused_ms: wasRunning ? await held.ms() : 0, live };
}

/**
 * Can the guest run on while its memory is captured? Only under KVM, whose dirty log is what
 * live migration rests on. Under TCG, QEMU 7.2 misses some of the guest's writes during a live
 * migration: the captures of busy guests held stale pages of the kernel's own data (its per-CPU
 * areas among them), one in about eight on this host, compared page by page with the stopped
 * source, and their forks crashed on their first instructions (docs/forks.md). So under TCG the
 * guest is stopped for the whole capture, as for a suspend. Asked of the running QEMU, not the
 * configuration: an error counts as TCG, the safe side.
 */
export async function liveCapture(qmp: Pick<QmpClient, 'execute'>): Promise<boolean> {
  const kvm = await qmp.execute<{ enabled?: boolean }>('query-kvm').catch(() => undefined);
  return kvm?.enabled === true;
}

/**
 * How long the guest was stopped, by QEMU's own STOP and RESUME events (their timestamps are
 * QEMU's clock); undefined events fall back to the daemon's clock between seeing them.
 */
function holdTimer(qmp: QmpClient): { ms(): Promise<number>; stop(): void } {
  let stopped: number | undefined;
  let resumed: number | undefined;
  let wake: (() => void) | undefined;
  const at = (e: QmpEvent) => (e.timestamp ? e.timestamp.seconds * 1000 + e.timestamp.microseconds / 1000 : Date.now());
  const on = (e: QmpEvent) => {
    if (e.event === 'STOP' && stopped === undefined) stopped = at(e);
    if (e.event === 'RESUME' && stopped !== undefined && resumed === undefined) {
      resumed = at(e);
      wake?.();
    }
  };
  qmp.on('event', on);
  const stop = () => void qmp.off('event', on);
  return {
    stop,
    async ms() {
      // RESUME comes as an event, after `cont`'s answer: wait for it a little.
      if (resumed === undefined) await new Promise<void>((r) => ((wake = r), setTimeout(r, 1000)));
      stop();
      return stopped !== undefined && resumed !== undefined ? Math.round(resumed - stopped) : 0;
    },
  };
}

/** Runs the guest on after a capture; a paused one is held again (see captureVm, step 5). */
async function resume(qmp: QmpClient, wasRunning: boolean): Promise<void> {
  const st = await qmp.execute<{ status: string }>('query-status').catch(() => ({ status: 'paused' }));
  // A migration that completed left the disk deactivated: only `cont` brings it back.
  if (wasRunning || st.status === 'postmigrate') await qmp.execute('cont');
  if (!wasRunning) await qmp.execute('stop');
}

/**
 * Removes a capture's saved state (its stream, and the RAM image its forks made of it) from the
 * VM's directory; its forks keep their links. The layer
 * stays: the VM's disk stands on it.
 */
export async function dropCapture(dir: string, id: string): Promise<void> {
  if (!isCaptureId(id)) return;
  for (const n of await readdir(dir).catch(() => [] as string[]))
    if ([`${id}.state`, `${id}.state.tmp`, `${id}.ram`, `${id}.dev`].includes(n))
      await rm(join(dir, n), { force: true });
}
