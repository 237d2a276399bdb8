import { InvalidStateError } from '../../domain/errors.js';
import type { ImageSource, ImportRules, RegistrySource } from '../../domain/image-request.js';
import type { ImageBundle } from '../../domain/image-fetch.js';
import type { VmRef } from '../../ports/hypervisor.js';
import type { ImageDetails, ImageInfo, ImageProgress } from '../../ports/guest-images.js';
import type { ImageCatalog } from '../images/image-catalog.js';

/**
 * The image half of a hypervisor adapter whose guests boot the shared catalog's images
 * (image-catalog.ts): each call goes to the catalog. What differs per adapter is where a VM's
 * disk is (`diskOf`) and whether the VM runs (`runs`), which a bake needs.
 */
export abstract class CatalogImages {
  constructor(protected readonly images: ImageCatalog) {}

  /** The path of the VM's disk in its directory. */
  protected abstract diskOf(vm: VmRef): string;
  /** Whether the VM runs now (a running VM's disk is not baked). */
  protected abstract runs(name: string): boolean;

  async resolveImage(image: string): Promise<ImageInfo> {
    return this.images.info(image);
  }

  ensureImage(image: string, progress?: (p: ImageProgress) => void): Promise<void> {
    return this.images.ensure(image, progress);
  }

  rebuildImage(image: string): Promise<void> {
    return this.images.rebuild(image);
  }

  forgetOlderBuilds(standing: (id: string) => VmRef[]): Promise<string[]> {
    return this.images.forgetOlderBuilds((id) => standing(id).map((vm) => this.diskOf(vm)));
  }

  listImages(inUse: (id: string) => string[]): Promise<ImageDetails[]> {
    return this.images.list(inUse);
  }

  getImage(image: string, inUse: (id: string) => string[]): Promise<ImageDetails> {
    return this.images.details(image, inUse);
  }

  digest(image: string, vm?: VmRef): Promise<string> {
    return this.images.digest(image, vm && this.diskOf(vm));
  }

  bundle(image: string): Promise<ImageBundle & { paths: Record<string, string> }> {
    return this.images.bundle(image);
  }

  installImage(bundle: ImageBundle, fill: (dir: string) => Promise<void>): Promise<void> {
    return this.images.installImage(bundle, fill);
  }

  removeImage(image: string): Promise<void> {
    return this.images.remove(image);
  }

  registryDigest(source: RegistrySource, insecureRegistries: readonly string[]): Promise<string> {
    return this.images.registryDigest(source, insecureRegistries);
  }

  bakeImage(id: string, vm: VmRef, meta: { from_image: string; description: string; source: string }): Promise<void> {
    if (this.runs(vm.name)) throw new InvalidStateError(`vm ${vm.name} is running; bake a stopped vm`);
    return this.images.bake(id, this.diskOf(vm), meta);
  }

  importImage(
    id: string,
    source: ImageSource,
    rules: ImportRules,
    meta: { ssh_user?: string; description?: string },
    progress: (p: ImageProgress) => void,
  ): Promise<void> {
    return this.images.import(id, source, rules, meta, progress);
  }
}
