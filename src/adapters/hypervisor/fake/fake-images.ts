import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ImageBundle } from '../../../domain/image-fetch.js';
import {
  AlreadyExistsError,
  InternalError,
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
} from '../../../domain/errors.js';
import type { ImageSource, ImportRules, RegistrySource } from '../../../domain/image-request.js';
import { checkImportFile, sniffImportFile } from '../../images/import-files.js';
import { readyDisk } from '../../images/disk-unpack.js';
import type { VmRef } from '../../../ports/hypervisor.js';
import type { ImageDetails, ImageInfo, ImageProgress } from '../../../ports/guest-images.js';

/**
 * Images the fake knows. `never-ready` boots but its guest never answers (for deadline tests);
 * `fail-provision` and `fail-boot` fail at those steps. `app` has an entrypoint, as a container
 * image's: the daemon hands it to the hypervisor, and the fake's guests never run it (a fake_agent
 * guest is this host).
 */
const FAKE_IMAGES: Record<string, ImageInfo> = {
  debian: { id: 'debian', agent_ready: true, ssh_user: 'svc', min_disk_gb: 2, min_memory_mb: 256, built: true },
  minimal: { id: 'minimal', agent_ready: true, ssh_user: 'svc', min_disk_gb: 1, min_memory_mb: 128, built: true },
  'ssh-only': { id: 'ssh-only', agent_ready: false, ssh_user: 'svc', min_disk_gb: 1, built: true },
  'never-ready': { id: 'never-ready', agent_ready: true, ssh_user: 'svc', min_disk_gb: 1, built: true },
  'fail-provision': { id: 'fail-provision', agent_ready: true, ssh_user: 'svc', min_disk_gb: 1, built: true },
  'fail-boot': { id: 'fail-boot', agent_ready: true, ssh_user: 'svc', min_disk_gb: 1, built: true },
  app: {
    id: 'app',
    agent_ready: true,
    ssh_user: 'root',
    min_disk_gb: 1,
    built: true,
    entrypoint: { cmd: '/srv/app/serve', args: ['--port', '8080'], user: 'app', cwd: '/srv/app', tag: 'entrypoint' },
  },
};
/** As on QEMU, `default` names the debian image. */
const FAKE_ALIASES: Record<string, string> = { default: 'debian' };

/**
 * The image half of the fake hypervisor (its GuestImages port): the fixed images, those baked,
 * imported or fetched from another fake node, each with a build count a test can raise. What it
 * needs of the VMs is whether one runs (`runs`), which a bake needs.
 */
export abstract class FakeImages {
  private readonly removed = new Set<string>();
  /** When images were baked, imported or fetched here (the fixed ones: never, the epoch). */
  private readonly madeAt = new Map<string, number>();
  /** What a bake said its image is, as the QEMU adapter keeps it in the image's manifest. */
  private readonly described = new Map<string, string>();
  /** This instance's images: the fixed ones plus those baked. */
  private readonly images: Record<string, ImageInfo> = { ...FAKE_IMAGES };
  /** Builds of unbuilt images started (one per image, shared by whoever waits for it). */
  readonly builds: string[] = [];
  private readonly building = new Map<string, Promise<void>>();

  private readonly buildDelayMs: number;

  /**
   * `unbuilt` start not built: the first ensureImage builds them, taking `buildDelayMs`. `outdated`
   * start built by an older svc, until rebuildImage.
   */
  constructor(options: { unbuilt?: string[]; outdated?: string[]; buildDelayMs?: number }) {
    this.buildDelayMs = options.buildDelayMs ?? 0;
    for (const id of options.unbuilt ?? []) if (this.images[id]) this.images[id] = { ...this.images[id], built: false };
    for (const id of options.outdated ?? [])
      if (this.images[id]) this.images[id] = { ...this.images[id], outdated: true };
  }

  /** Whether the VM runs now (a running VM is not baked). */
  protected abstract runs(name: string): boolean;

  async resolveImage(image: string): Promise<ImageInfo> {
    const info = this.images[FAKE_ALIASES[image] ?? image];
    if (!info)
      throw new InvalidArgumentError(
        `unknown image "${image}" (the fake hypervisor has: ${Object.keys(this.images).join(', ')})`,
      );
    return { ...info, revision: info.built ? String(this.revisions.get(info.id) ?? 1) : undefined };
  }

  /** Each image's build count: a test "rebuilds" one to make its snapshots stale. */
  private readonly revisions = new Map<string, number>();

  rebuild(image: string): void {
    this.revisions.set(image, (this.revisions.get(image) ?? 1) + 1);
  }

  /**
   * A build of `id` for `buildDelayMs`, which creates of it join meanwhile; then it is built (and no
   * longer outdated), and `after` runs.
   */
  private startBuild(id: string, after?: () => void): Promise<void> {
    this.builds.push(id);
    const b = new Promise<void>((r) => setTimeout(r, this.buildDelayMs)).then(() => {
      const { outdated: _was, ...now } = this.images[id];
      this.images[id] = { ...now, built: true };
      after?.();
      this.building.delete(id);
    });
    this.building.set(id, b);
    return b;
  }

  /**
   * An outdated image (options.outdated) built again, as the catalog does it: not built meanwhile
   * (creates join the build), then built with a new revision, the build it replaced kept until
   * forgetOlderBuilds.
   */
  rebuildImage(image: string): Promise<void> {
    const id = FAKE_ALIASES[image] ?? image;
    if (!this.images[id]) return Promise.reject(new InvalidArgumentError(`unknown image "${image}"`));
    this.images[id] = { ...this.images[id], built: false };
    return this.startBuild(id, () => {
      this.olderBuilds.set(id, new Set([...(this.olderBuilds.get(id) ?? []), this.buildOf(id)]));
      this.rebuild(id);
    });
  }

  /** Older builds (revisions) kept per image (rebuildImage), until no VM stands on them. */
  private readonly olderBuilds = new Map<string, Set<number>>();

  /** The current build (revision) of an image. */
  protected buildOf(image: string): number {
    return this.revisions.get(FAKE_ALIASES[image] ?? image) ?? 1;
  }

  /** The build of its image the VM's disk was made from (undefined: not known). */
  protected abstract builtOn(name: string): number | undefined;

  async forgetOlderBuilds(standing: (id: string) => VmRef[]): Promise<string[]> {
    const cleaned: string[] = [];
    for (const [id, kept] of this.olderBuilds) {
      const on = standing(id).map((vm) => this.builtOn(vm.name));
      if (this.building.has(id) || on.some((b) => b === undefined)) continue;
      const gone = [...kept].filter((b) => !on.includes(b));
      for (const b of gone) kept.delete(b);
      if (!kept.size) this.olderBuilds.delete(id);
      if (gone.length) cleaned.push(id);
    }
    return cleaned;
  }

  /** An unbuilt image (options.unbuilt) is built once, however many wait for it. */
  async ensureImage(image: string): Promise<void> {
    const info = await this.resolveImage(image);
    if (info.built) return;
    await (this.building.get(info.id) ?? this.startBuild(info.id));
  }

  async listImages(inUse: (id: string) => string[]): Promise<ImageDetails[]> {
    const ids = Object.keys(this.images).filter((id) => !this.removed.has(id));
    return Promise.all(ids.map((id) => this.getImage(id, inUse)));
  }

  async getImage(image: string, inUse: (id: string) => string[]): Promise<ImageDetails> {
    const info = this.images[FAKE_ALIASES[image] ?? image];
    if (!info || this.removed.has(info.id)) throw new NotFoundError(`image ${image} is not built`);
    return {
      ...info,
      os: 'fake',
      description: this.described.get(info.id) ?? `the fake hypervisor's ${info.id} image`,
      size_bytes: 0,
      created_at: new Date(this.madeAt.get(info.id) ?? 0).toISOString(),
      boot: 'kernel',
      source: info.id,
      in_use_by: inUse(info.id),
      ...(this.olderBuilds.get(info.id)?.size ? { older_builds: this.olderBuilds.get(info.id)!.size } : {}),
    };
  }

  /** A baked image is the base image's info under a new id; the VM must be stopped, as on QEMU. */
  async bakeImage(id: string, vm: VmRef, meta: { from_image: string; description: string }): Promise<void> {
    if (this.runs(vm.name)) throw new InvalidStateError(`vm ${vm.name} is running; bake a stopped vm`);
    if (this.images[id] && !this.removed.has(id)) throw new AlreadyExistsError(`image ${id} already exists`);
    const base = await this.resolveImage(meta.from_image);
    this.add({ ...base, id });
    this.described.set(id, meta.description);
  }

  /**
   * Checks the host file as the QEMU adapter does first, and downloads a disk's URL as it does; a
   * disk is an SSH image, an archive an agent one. An image in a registry is taken as it is named
   * (the fake reaches no registry).
   */
  async importImage(
    id: string,
    source: ImageSource,
    rules: ImportRules,
    meta: { ssh_user?: string },
    progress: (p: ImageProgress) => void,
  ): Promise<void> {
    if (this.images[id] && !this.removed.has(id)) throw new AlreadyExistsError(`image ${id} already exists`);
    if (source.type === 'docker') {
      this.checkLogin(source);
      progress({ percent: 50, message: `pulling docker://${source.ref}` });
    } else if (source.type === 'url' || source.type === 'disk') {
      // downloaded, unpacked and checked as the QEMU adapter does: what it refuses is refused here too
      const work = await mkdtemp(join(tmpdir(), 'svc-fake-disk-'));
      try {
        const given =
          source.type === 'url'
            ? source
            : { type: 'disk' as const, file: await checkImportFile(source.path, rules.dirs) };
        const disk = await readyDisk(given, work, progress);
        await sniffImportFile(disk.file, 'disk', disk.label);
        disk.progress({ percent: 50, message: `importing ${disk.label}` });
      } finally {
        await rm(work, { recursive: true, force: true });
      }
    } else {
      const file = await checkImportFile(source.path, rules.dirs);
      await sniffImportFile(file, source.type);
      progress({ percent: 50, message: `importing ${source.type}:${file}` });
    }
    const disk = source.type === 'disk' || source.type === 'url';
    this.add({
      id,
      agent_ready: !disk,
      ssh_user: disk ? (meta.ssh_user ?? 'root') : 'root',
      min_disk_gb: 1,
      built: true,
    });
  }

  /** The versions the fake's "registry" holds of each reference (1 until a test moves its tag). */
  private readonly pushed = new Map<string, number>();
  /** The fake's registry does not answer (a test of a build that takes the image pulled before). */
  registryDown = false;

  /** A new image is pushed under `ref` (`REGISTRY/PATH:TAG`, as normalRegistryRef makes it): its digest changes. */
  pushTag(ref: string): void {
    this.pushed.set(ref, (this.pushed.get(ref) ?? 1) + 1);
  }

  /** The one login the fake's registry takes, when a test gives it one (none: it asks for none). */
  registryLogin?: { username: string; password: string };

  private checkLogin(source: RegistrySource): void {
    const want = this.registryLogin;
    if (want && (source.auth?.username !== want.username || source.auth.password !== want.password))
      throw new InvalidArgumentError(`from: docker://${source.ref}: unauthorized: authentication required`);
  }

  /** A digest for each version of each reference; the fake reaches no registry. */
  async registryDigest(source: RegistrySource): Promise<string> {
    if (this.registryDown)
      throw new InvalidArgumentError(`from: docker://${source.ref}: the fake registry does not answer`);
    this.checkLogin(source);
    const version = `${source.ref}#${this.pushed.get(source.ref) ?? 1}`;
    return `sha256:${createHash('sha256').update(version).digest('hex')}`;
  }

  /** Fake images are alike on every fake node, build for build. */
  async digest(image: string): Promise<string> {
    const info = await this.getImage(image, () => []);
    return `fake:${info.id}:${this.revisions.get(info.id) ?? 1}`;
  }

  /** A fake image travels as its manifest: what the fake knows of it, in a file of its own. */
  async bundle(image: string): Promise<ImageBundle & { paths: Record<string, string> }> {
    const info = await this.getImage(image, () => []);
    // One directory for every offer this fake makes, the manifest written as the image is now.
    const dir = join(await (this.bundleRoot ??= mkdtemp(join(tmpdir(), 'svc-fake-image-'))), info.id);
    await mkdir(dir, { recursive: true });
    const body = JSON.stringify(this.images[info.id]);
    await writeFile(join(dir, 'manifest.json'), body);
    const sha256 = createHash('sha256').update(body).digest('hex');
    return {
      id: info.id,
      digest: await this.digest(info.id),
      files: [{ name: 'manifest.json', size: Buffer.byteLength(body), sha256 }],
      paths: { 'manifest.json': join(dir, 'manifest.json') },
    };
  }

  private bundleRoot?: Promise<string>;

  /** An image fetched from another fake node: what its manifest says, checked against its hash. */
  async installImage(bundle: ImageBundle, fill: (dir: string) => Promise<void>): Promise<void> {
    if (this.images[bundle.id] && !this.removed.has(bundle.id))
      throw new AlreadyExistsError(`image ${bundle.id} is built here already`);
    const dir = await mkdtemp(join(tmpdir(), 'svc-fake-fetch-'));
    try {
      await fill(dir);
      const body = await readFile(join(dir, 'manifest.json'));
      if (createHash('sha256').update(body).digest('hex') !== bundle.files[0]?.sha256)
        throw new InternalError(`image ${bundle.id} as fetched does not match the sha256 of manifest.json`);
      this.add({ ...(JSON.parse(body.toString()) as ImageInfo), id: bundle.id, built: true });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  /** An image made here now (baked, imported or fetched), in place of one removed under its id. */
  private add(info: ImageInfo): void {
    this.images[info.id] = info;
    this.madeAt.set(info.id, Date.now());
    this.removed.delete(info.id);
    this.described.delete(info.id);
  }

  async removeImage(image: string): Promise<void> {
    await this.getImage(image, () => []);
    this.removed.add(FAKE_ALIASES[image] ?? image);
  }

  /** Removes what `bundle` wrote. */
  protected async dropBundles(): Promise<void> {
    if (this.bundleRoot) await rm(await this.bundleRoot, { recursive: true, force: true });
    this.bundleRoot = undefined;
  }
}
