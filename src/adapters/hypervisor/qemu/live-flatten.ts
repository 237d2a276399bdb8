import { randomBytes } from 'node:crypto';
import { readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../../../ports/logger.js';
import { layersOf, LAYER, MAX_LAYERS } from './disk-layers.js';
import { backingName } from '../../images/qcow2-backing.js';
import type { QmpClient, QmpEvent } from './qmp-client.js';

const DISK = 'disk.qcow2';

/** What QEMU says of an image: the one under it, as it opened it (its graph, not the header's name). */
interface ImageInfo {
  'backing-image'?: ImageInfo;
}

/** What `query-block` says of a drive, as far as a flatten needs it. */
interface BlockInfo {
  device: string;
  inserted?: { drv?: string; image?: ImageInfo };
}

/** What `query-named-block-nodes` says of a node. */
interface NodeInfo {
  'node-name': string;
  drv: string;
  image?: ImageInfo;
}

/** How many images stand under this one in QEMU's graph. */
function depthOf(info: ImageInfo | undefined): number {
  let n = 0;
  for (let i = info?.['backing-image']; i; i = i['backing-image']) n++;
  return n;
}

/** How a flatten ended: done (the disk stands on the image again), called off, or failed. */
export type FlattenEnd = 'done' | 'cancelled' | 'skipped' | { error: string };

/**
 * Takes the frozen layers a running VM's disk stands on out of its chain, while the guest runs:
 * QEMU's `block-stream` copies what those layers hold (and the disk does not) into the disk, then
 * points the disk at the chain's bottom (the image's disk) and lets go of them. A VM forked again
 * and again gains a layer per capture (vm-capture.ts), and every read of a block it has not
 * written walks that chain; past MAX_LAYERS, this puts it back on one. The layers stay while the
 * forks that stand on them link them; this VM's own links to them go once QEMU no longer reads
 * them. Only what the layers hold is copied: the image below is not.
 */
export async function flattenRunning(
  qmp: QmpClient,
  dir: string,
  calledOff: () => boolean,
  maxLayers = MAX_LAYERS,
): Promise<FlattenEnd> {
  const chain = await layersOf(dir);
  if (chain.length < maxLayers) return 'skipped';
  const below = await backingName(join(dir, chain[chain.length - 1]));
  // A chain with nothing under its last layer would be copied whole: not worth it.
  if (!below) return 'skipped';
  const drives = await qmp.execute<BlockInfo[]>('query-block');
  const drive = drives.find((b) => b.inserted?.drv === 'qcow2');
  if (!drive?.inserted?.image) return { error: 'the vm has no qcow2 disk' };
  const depth = depthOf(drive.inserted.image);
  // The node the chain keeps: the one `chain.length` layers below the disk. The chain is linear, so
  // how many images stand under a format node names its place (QEMU knows the layers it was handed
  // as descriptors by no file name of theirs).
  const nodes = await qmp.execute<NodeInfo[]>('query-named-block-nodes');
  const base = nodes.find((n) => n.drv === 'qcow2' && depthOf(n.image) === depth - chain.length - 1);
  if (!base) return { error: `no node ${chain.length + 1} below the disk in QEMU's graph` };
  if (calledOff()) return 'cancelled';
  const job = `flatten-${randomBytes(4).toString('hex')}`;
  const ended = jobEnd(qmp, job);
  try {
    await qmp.execute('block-stream', {
      'job-id': job,
      device: drive.device,
      'base-node': base['node-name'],
      // Written into the disk's header as it is: the name the last layer gave its backing file.
      'backing-file': below,
    });
  } catch (err) {
    ended.stop();
    return { error: (err as Error).message };
  }
  if (calledOff()) await qmp.execute('block-job-cancel', { device: job }).catch(() => undefined);
  const end = await ended.done;
  if (end !== 'done') return end;
  if ((await backingName(join(dir, DISK))) !== below) return { error: 'the disk does not name its new backing file' };
  await dropUnread(dir);
  return 'done';
}

/**
 * Removes the directory's links to frozen layers its disk no longer stands on (a flatten's, and
 * one a daemon that died meanwhile left). The file itself stays while a fork or clone links it.
 */
async function dropUnread(dir: string): Promise<void> {
  const keep = new Set(await layersOf(dir));
  const disk = await stat(join(dir, DISK));
  for (const n of await readdir(dir)) {
    if (!LAYER.test(n) || keep.has(n)) continue;
    // A layer that is the disk under a second name is a capture being made: not this one's to remove.
    if ((await stat(join(dir, n)).catch(() => null))?.ino === disk.ino) continue;
    await rm(join(dir, n), { force: true });
  }
}

/** Waits for the block job `job` to end, by QEMU's events (or the monitor closing). */
function jobEnd(qmp: QmpClient, job: string): { done: Promise<FlattenEnd>; stop(): void } {
  let settle!: (e: FlattenEnd) => void;
  const done = new Promise<FlattenEnd>((r) => (settle = r));
  const on = (e: QmpEvent) => {
    const data = (e.data ?? {}) as { device?: string; error?: string };
    if (data.device !== job) return;
    if (e.event === 'BLOCK_JOB_COMPLETED') finish(data.error ? { error: data.error } : 'done');
    else if (e.event === 'BLOCK_JOB_CANCELLED') finish('cancelled');
  };
  const closed = () => finish({ error: 'QEMU went away' });
  const stop = () => {
    qmp.off('event', on);
    qmp.off('close', closed);
  };
  const finish = (end: FlattenEnd) => {
    stop();
    settle(end);
  };
  qmp.on('event', on);
  qmp.on('close', closed);
  return { done, stop };
}

/**
 * The flattens under way, one per VM at most. Whatever else changes a running VM's disk or saves
 * it (a capture, a suspend) calls its VM's off first and waits for it (`settle`): a block job holds
 * the disk, and QEMU refuses both beside one.
 */
export class LiveFlattens {
  private readonly running = new Map<string, { job: Promise<FlattenEnd>; off: boolean; qmp: QmpClient }>();

  constructor(
    private readonly log: Logger,
    private readonly maxLayers = MAX_LAYERS,
  ) {}

  /** Starts a flatten of the running VM `name` when its chain is long enough; returns at once. */
  start(name: string, qmp: QmpClient, dir: string): void {
    if (this.running.has(name)) return;
    const entry = { off: false, qmp, job: Promise.resolve<FlattenEnd>('skipped') };
    const t0 = Date.now();
    entry.job = flattenRunning(qmp, dir, () => entry.off, this.maxLayers)
      .catch((err: Error): FlattenEnd => ({ error: err.message }))
      .then((end) => {
        if (end === 'done') this.log.info({ vm: name, flatten_ms: Date.now() - t0 }, 'disk chain flattened');
        else if (typeof end === 'object' && !entry.off)
          this.log.warn({ vm: name, err: end.error }, 'cannot flatten the disk chain; it stays as it is');
        return end;
      })
      .finally(() => {
        if (this.running.get(name) === entry) this.running.delete(name);
      });
    this.running.set(name, entry);
  }

  /** Calls off the VM's flatten, if one runs, and waits until it has ended. */
  async settle(name: string): Promise<void> {
    const entry = this.running.get(name);
    if (!entry) return;
    entry.off = true;
    const jobs = await entry.qmp.execute<{ device: string }[]>('query-block-jobs').catch(() => []);
    for (const j of jobs)
      if (j.device.startsWith('flatten-'))
        await entry.qmp.execute('block-job-cancel', { device: j.device }).catch(() => undefined);
    await entry.job;
  }

  /** The VM's flatten, if one runs (tests wait on it). */
  under(name: string): Promise<FlattenEnd> | undefined {
    return this.running.get(name)?.job;
  }
}
