import { open, rename, rm } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Failpoints } from '../../../ports/failpoints.js';
import type { Logger } from '../../../ports/logger.js';
import type { VmRef, VmSpec } from '../../../ports/hypervisor.js';
import { replaceState, type Frozen } from './disk-layers.js';
import { layout, qmpPath } from './qemu-files.js';
import { spawnQemu, STATE_FD } from './qemu-spawn.js';
import { copySparse, type RamStaging } from './ram-staging.js';
import { processOwner, saveStream, savedFiles, type Saved } from './saved-state.js';
import type { VmCommand } from './vm-command.js';
import { orAfter } from '../../process-kit/or-after.js';

/**
 * A RAM image is a saved state split in two: `<base>.ram`, the guest's memory as a sparse file of
 * its full size, and `<base>.dev`, the device state saved with `x-ignore-shared` (under 1 MB).
 * A VM restores from it by mapping the file copy-on-write as its RAM (`memory-backend-file`,
 * `share=off`) and loading only the device state: nothing is read before the guest runs, the
 * pages it touches come from the host's page cache, and every VM restored from one image shares
 * the pages none of them changed. A 140 MB stream took 160-820 ms to load into fresh memory on
 * this host; the image loads in about 45 ms (docs/suspend-and-clones.md). The image is made in a
 * staging folder on a memory filesystem when there is one (ram-staging.ts) and copied beside the VM.
 */

export interface MakeImage {
  binary: string;
  dir: string;
  disk: string;
  qmp: string;
  /** The migration stream to turn into an image, a file in `dir`. */
  stream: string;
  /** The image's base name in `dir`. */
  base: string;
  /** QEMU's command line for the VM, with `ramFile` (shared) on `ramPath` and `-incoming fd:3`. */
  args: string[];
  /**
   * Where QEMU writes the memory: `<base>.ram.tmp` in `dir` (the default), or a file in a staging
   * folder on a memory filesystem (ram-staging.ts), copied to `<base>.ram.tmp` once it is whole.
   */
  ramPath?: string;
  /** Called once the stream is loaded, before the device state is saved (a test's failpoint). */
  loaded?: () => void;
}

/** The pidfile of the QEMU that makes a VM's RAM image, in the VM's directory. */
export const MAKER_PIDFILE = 'ram-image.pid';

/** Where `makeRamImage` has QEMU write the memory (the args must map this path, shared). */
export const ramTmp = (dir: string, base: string) => join(dir, `${base}.ram.tmp`);

/**
 * Loads the stream into a QEMU whose RAM is the image file (the guest never runs), saves its
 * device state without that RAM, and makes both files whole on disk before they get their names:
 * a crash leaves `.tmp` files that no marker names (clearSaved removes them).
 */
export async function makeRamImage(
  m: MakeImage,
): Promise<{ saved: Saved; ms: Record<'load' | 'devices' | 'quit' | 'copy' | 'sync', number> }> {
  const saved: Saved = { kind: 'image', base: m.base };
  let t = Date.now();
  const lap = () => -t + (t = Date.now());
  const ms = { load: 0, devices: 0, quit: 0, copy: 0, sync: 0 };
  const [ram, dev] = savedFiles(saved);
  const tmp = ramTmp(m.dir, m.base);
  const written = m.ramPath ?? tmp;
  // What a failure leaves of the image: nothing (a staged file would hold memory until the daemon stops).
  const discard = () => Promise.all([join(m.dir, dev), tmp, written].map((f) => rm(f, { force: true })));
  await rm(tmp, { force: true });
  if (written !== tmp) await rm(written, { force: true });
  try {
    const started = await spawnQemu({
      binary: m.binary,
      args: m.args,
      dir: m.dir,
      disk: m.disk,
      qmp: m.qmp,
      stateFile: join(m.dir, m.stream),
      run: false,
    });
    if (started instanceof Error) throw started;
    ms.load = lap();
    m.loaded?.();
    const { child, qmp } = started;
    const gone = new Promise<void>((r) => (child.exitCode !== null ? r() : child.once('exit', () => r())));
    try {
      await saveStream(qmp, m.dir, { owner: await processOwner(child.pid!), file: dev, ramImage: true });
      ms.devices = lap();
      await qmp.execute('quit').catch(() => undefined);
      await orAfter(gone, 5000, undefined);
      ms.quit = lap();
    } finally {
      qmp.close();
      try {
        process.kill(child.pid!, 'SIGKILL');
      } catch {
        // quit already
      }
      await orAfter(gone, 5000, undefined);
    }
    if (written !== tmp) {
      await copySparse(written, tmp);
      await rm(written, { force: true });
      ms.copy = lap();
    }
  } catch (err) {
    await discard();
    throw err;
  }
  const fh = await open(tmp, 'r+');
  try {
    // The guest's memory (its secrets among it): as private as the stream was.
    await fh.chmod(0o600);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, join(m.dir, ram));
  ms.sync = lap();
  return { saved, ms };
}

/** How many QEMUs try to make one RAM image before its VM keeps the stream. */
const MAKE_TRIES = 2;

/** Makes RAM images for VMs set up as their specs say, or tells why a VM keeps its stream. */
export class RamImages {
  constructor(
    private readonly o: {
      binary: string;
      command: VmCommand;
      log: Logger;
      failpoints?: Failpoints;
      enabled: boolean;
      /** Where images are made before they are copied beside the VM (none: made in place). */
      staging?: RamStaging;
    },
  ) {}

  /**
   * Can a VM like `spec` restore from a RAM image? Not with virtio-fs shares; not at all with
   * `qemu.ram_images: false` (saved states stay streams: the benchmarks' other half).
   */
  fits(spec: VmSpec): boolean {
    return this.o.enabled && this.o.command.ramCanBeFile(spec);
  }

  /**
   * A frozen template whose saved state is a stream gets a RAM image made from it, once (the
   * note of the freeze remembers it), so its clones map one memory file instead of each loading
   * the stream. When the image cannot be made the clones load the stream as before.
   */
  async forTemplate(template: VmRef, top: Frozen, spec: VmSpec): Promise<Frozen> {
    if (top.state?.kind !== 'stream') return top;
    const saved = await this.make(
      { ...spec, name: template.name, dir: template.dir },
      top.state.file,
      top.state.file.replace(/\.state$/, ''),
    );
    return saved ? replaceState(template.dir, top, saved) : top;
  }

  /**
   * Makes a RAM image `<base>.ram`/`<base>.dev` in `spec.dir` from the migration stream `stream`
   * there, with QEMU set up as for `spec`; undefined (and the stream stays what restores) when the
   * VM cannot use one or each of its tries fails.
   */
  async make(spec: VmSpec, stream: string, base: string): Promise<Saved | undefined> {
    if (!this.fits(spec)) return undefined;
    // QEMU dies now and then loading a stream on a busy host (as a restore may): one more try
    // before the VM (or every fork of a capture) falls back to loading the stream.
    for (let tries = 1; ; tries++) {
      try {
        return await this.makeOnce(spec, stream, base);
      } catch (err) {
        const last = tries >= MAKE_TRIES;
        this.o.log.warn(
          { vm: spec.name, err: (err as Error).message, try: tries },
          last ? 'cannot make a ram image; the saved stream restores' : 'cannot make a ram image; trying again',
        );
        if (last) return undefined;
      }
    }
  }

  private async makeOnce(spec: VmSpec, stream: string, base: string): Promise<Saved> {
    const t0 = Date.now();
    const qmp = qmpPath(spec.dir, 'ram-image.sock');
    const pidfile = join(spec.dir, MAKER_PIDFILE);
    // A NIC socket nobody connects to: the guest never runs in this QEMU.
    const net = qmpPath(spec.dir, 'ram-image-net.sock');
    let staged: { dir: string; release: () => void } | undefined;
    try {
      staged = await this.o.staging?.dirFor(spec.memory_mb * 2 ** 20);
      const ramPath = staged ? join(staged.dir, `${randomBytes(8).toString('hex')}.ram.tmp`) : ramTmp(spec.dir, base);
      // Its own monitor, NIC socket and pid file, apart from the VM's.
      const args = await this.o.command.args(spec, {
        incomingFd: STATE_FD,
        ramFile: { path: ramPath, shared: true },
        layout: { ...layout(spec.dir), qmp, net, pidfile },
      });
      const loaded = () => this.o.failpoints?.hit('suspend.image');
      const { saved, ms } = await makeRamImage({
        binary: this.o.binary,
        dir: spec.dir,
        disk: layout(spec.dir).disk,
        qmp,
        stream,
        base,
        args,
        ramPath,
        loaded,
      });
      this.o.log.info({ vm: spec.name, ms: Date.now() - t0, steps_ms: ms }, 'ram image made');
      return saved;
    } finally {
      staged?.release();
      await rm(qmp, { force: true });
      await rm(net, { force: true });
      await rm(pidfile, { force: true });
    }
  }
}
