import { constants } from 'node:fs';
import { copyFile, link, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { InternalError } from '../../../domain/errors.js';
import type { VmRef, VmSpec } from '../../../ports/hypervisor.js';
import { chainFault, freeze, restandOn, shareInto, type Frozen } from './disk-layers.js';
import type { ImageCatalog } from '../../images/image-catalog.js';
import type { Logger } from '../../../ports/logger.js';
import type { ImageBases } from './image-bases.js';
import { seedFor, writeSeed } from '../guest-seed.js';
import { makeOverlay } from '../../images/overlay.js';
import { layout } from './qemu-files.js';
import type { RamImages } from './ram-image.js';
import { readSaved, savedFiles, writeSaved } from './saved-state.js';
import { spareDir, type SpareQemus } from './spare-qemus.js';
import { captureTop, isCaptureId } from './vm-capture.js';
import { replaceSnapshotState, restandSnapshots, shareSnapshot, sharedBefore } from './vm-snapshots.js';
import { snapshotOfSource } from '../../../domain/snapshots.js';

export interface VmDiskOptions {
  images: ImageCatalog;
  ramImages: RamImages;
  spares: SpareQemus;
  mountDriver: '9p' | 'virtiofs';
  /** Does the host give VMs a vsock device (which a spare could not have the id of ahead)? */
  vsock: () => boolean;
  /** Clones may start in spares (`clone_spares`). */
  useSpares: boolean;
  /** A template's chain past this many layers is written into one at its next freeze (`max_disk_layers`). */
  maxLayers?: number;
  /** Where the image files disks are put on are recorded (image-bases.ts). */
  bases?: ImageBases;
  log?: Logger;
}

/** The files a QEMU VM starts from: a new VM's disk and seed, a clone's shared ones (the VmDisks port). */
export class QemuVmDisks {
  /** Captures for more than one fork, by `<source dir>/<capture id>`: what their forks link. */
  private readonly captures = new Map<string, { forks: number; top?: Promise<Frozen> }>();

  constructor(private readonly o: VmDiskOptions) {}

  async provision(spec: VmSpec): Promise<void> {
    const l = layout(spec.dir);
    await makeOverlay(await this.o.images.get(spec.image), l.disk, spec.disk_gb, spec.name);
    await writeSeed(l.seed, seedFor(spec, this.o.mountDriver));
  }

  /**
   * Before a start (a create's first one too): a disk whose image file moved with the images folder
   * is put on it at its new path (image-bases.ts), and the image build the disk stands on is
   * recorded. An unknown image fails here.
   */
  async standing(spec: VmSpec): Promise<void> {
    await this.restand(spec, spec.image);
    const image = await this.o.images.get(spec.image, layout(spec.dir).disk);
    await this.o.bases?.note(join(image.dir, image.disk)).catch(() => undefined);
  }

  /** A disk whose image file moved with the images folder stands on it at its new path (image-bases.ts). */
  async restand(vm: VmRef, image: string): Promise<void> {
    // Where the image's folder is now, without building a built-in one that is missing there.
    const folder = this.o.images.dir(this.o.images.canonical(image));
    const moved = await this.o.bases?.restand(vm.name, layout(vm.dir).disk, folder);
    if (moved)
      this.o.log?.info({ vm: vm.name, ...moved }, 'the image file of the disk moved: the disk stands on it again');
  }

  /**
   * A VM moved here: its disk stands on this node's image (same digest, other path); a stopped one
   * gets a seed with this node's SSH key for its next boot. A suspended guest's seed stays as it
   * was loaded (a device's backing file is not changed under a saved guest).
   */
  async takeIn(spec: VmSpec, suspended: boolean): Promise<void> {
    const image = await this.o.images.get(spec.image);
    await restandOn(spec.dir, join(image.dir, image.disk));
    await restandSnapshots(spec.dir, join(image.dir, image.disk));
    await this.o.bases?.note(join(image.dir, image.disk)).catch(() => undefined);
    if (!suspended) await writeSeed(layout(spec.dir).seed, seedFor(spec, this.o.mountDriver));
  }

  diskFault(vm: VmRef): Promise<string | undefined> {
    return chainFault(layout(vm.dir).disk);
  }

  /**
   * A clone shares its template's disk and saved state instead of copying them: the template is
   * frozen into a layer (once, until it changes again) and the clone gets links and an overlay
   * (disk-layers.ts), or the files of the QEMU started ahead for it (spare-qemus.ts). A template
   * suspended by an older daemon (an internal snapshot in its disk) is still copied whole.
   */
  async clone(template: VmRef, spec: VmSpec, capture?: string): Promise<{ snapshot: boolean }> {
    const named = snapshotOfSource(capture);
    if (named !== undefined) return this.fromSnapshot(template, spec, named);
    if (capture !== undefined) return this.fork(template, spec, capture);
    const saved = await readSaved(template.dir);
    await this.o.spares.sweep(template.dir);
    const disk = async (): Promise<boolean> => {
      try {
        if (saved?.kind !== 'snapshot') {
          const top = await this.o.ramImages.forTemplate(
            template,
            await freeze(template.dir, saved, this.o.maxLayers),
            spec,
          );
          if (this.spareFits(template, spec, top) && (await this.o.spares.claim(template, top, spec))) return true;
          return (await shareInto(template.dir, spec.dir, top)).snapshot;
        }
        // A reflink where the filesystem has them, else a copy; the overlay keeps its golden backing.
        await copyFile(layout(template.dir).disk, layout(spec.dir).disk, constants.COPYFILE_FICLONE);
        await writeSaved(spec.dir, saved);
        return true;
      } catch (err) {
        throw new InternalError(`cannot share the disk of template ${template.name}: ${(err as Error).message}`);
      }
    };
    // Two child processes (qemu-img, genisoimage) that do not depend on each other: side by side.
    const [snapshot] = await Promise.all([disk(), writeSeed(layout(spec.dir).seed, seedFor(spec, this.o.mountDriver))]);
    return { snapshot };
  }

  /**
   * A VM as one of its named snapshots holds it: links to the snapshot's layers and saved state.
   * The second one made from a snapshot whose memory is a migration stream makes a RAM image of it
   * (as the first fork of a capture for several does) and puts it in the snapshot in the stream's
   * place, so it and every later one (and a revert) map one memory file and share its pages,
   * rather than each load the stream. The first does not: one new VM from a snapshot is the common
   * case, and making the image costs it seconds. When the image cannot be made, the stream stays
   * and is loaded. The caller holds the VM's lock: two makers never race.
   */
  private async fromSnapshot(source: VmRef, spec: VmSpec, name: string): Promise<{ snapshot: boolean }> {
    try {
      const [shared] = await Promise.all([
        shareSnapshot(source.dir, name, spec.dir),
        writeSeed(layout(spec.dir).seed, seedFor(spec, this.o.mountDriver)),
      ]);
      const stream = shared.state?.kind === 'stream' ? shared.state.file : undefined;
      if (stream && (await sharedBefore(source.dir, name))) {
        const saved = await this.o.ramImages.make(spec, stream, stream.replace(/\.state$/, ''));
        if (saved) {
          await replaceSnapshotState(source.dir, name, spec.dir, saved);
          await writeSaved(spec.dir, saved);
          await rm(join(spec.dir, stream), { force: true });
        }
      }
      return { snapshot: shared.snapshot };
    } catch (err) {
      throw new InternalError(`cannot share snapshot ${name} of vm ${source.name}: ${(err as Error).message}`);
    }
  }

  /**
   * A fork stands on its source's capture (vm-capture.ts) as a clone stands on its template's
   * freeze: links to the layers and the saved state, and an overlay of its own. A capture for
   * several forks is made a RAM image by its first fork (`sharedCapture`), so they all map one
   * memory file; a single fork loads the stream.
   */
  private async fork(source: VmRef, spec: VmSpec, capture: string): Promise<{ snapshot: boolean }> {
    if (!isCaptureId(capture)) throw new InternalError(`not a capture: ${capture}`);
    try {
      const [{ snapshot }] = await Promise.all([
        this.sharedCapture(source, spec, capture),
        writeSeed(layout(spec.dir).seed, seedFor(spec, this.o.mountDriver)),
      ]);
      return { snapshot };
    } catch (err) {
      throw new InternalError(`cannot share the capture of vm ${source.name}: ${(err as Error).message}`);
    }
  }

  /** How many forks a capture is for, until it is dropped (QemuHypervisor.capture). */
  expectForks(source: VmRef, capture: string, forks: number): void {
    if (forks > 1) this.captures.set(join(source.dir, capture), { forks });
  }

  /** The capture's forks have what they need: its RAM image, if made, is no longer shared from here. */
  forgetCapture(source: VmRef, capture: string): void {
    this.captures.delete(join(source.dir, capture));
  }

  /**
   * The first fork of a capture for several links the stream, and makes from it, with its own
   * overlay as the disk (the maker's guest never runs, so nothing is written), the RAM image
   * `<capture>.ram`/`.dev`, which it links back beside the capture; the others wait for it and
   * link the image. The forks then share the memory pages none of them changed, as clones of a
   * template do. When the image cannot be made, every fork loads the stream.
   */
  private async sharedCapture(source: VmRef, spec: VmSpec, capture: string): Promise<{ snapshot: boolean }> {
    const shared = this.captures.get(join(source.dir, capture));
    if (!shared) return shareInto(source.dir, spec.dir, captureTop(capture));
    if (shared.top) return shareInto(source.dir, spec.dir, await shared.top);
    let made!: (top: Frozen) => void;
    shared.top = new Promise((r) => (made = r));
    let top = captureTop(capture);
    try {
      const linked = await shareInto(source.dir, spec.dir, top);
      const saved = await this.o.ramImages.make(spec, `${capture}.state`, capture);
      if (saved) {
        for (const f of savedFiles(saved)) await link(join(spec.dir, f), join(source.dir, f));
        await writeSaved(spec.dir, saved);
        await rm(join(spec.dir, `${capture}.state`), { force: true });
        top = { ...top, state: saved };
      }
      return linked;
    } finally {
      made(top);
    }
  }

  /**
   * Can a clone like `spec` of a template frozen as `top` start in a spare? A RAM image to map,
   * and nothing the spare could not know ahead: shares, an overlay address, a vsock id, a monitor
   * socket outside the VM directory (a long path).
   */
  private spareFits(template: VmRef, spec: VmSpec, top: Frozen): boolean {
    const inDir = (dir: string) => layout(dir).qmp === join(dir, 'qmp.sock');
    return (
      this.o.useSpares &&
      top.state?.kind === 'image' &&
      this.o.ramImages.fits(spec) &&
      !spec.mounts.length &&
      !spec.overlay_ip &&
      !this.o.vsock() &&
      inDir(spec.dir) &&
      inDir(spareDir(template.dir, '00000000'))
    );
  }
}
