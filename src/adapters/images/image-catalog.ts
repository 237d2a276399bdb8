import { existsSync, readFileSync, statSync } from 'node:fs';
import { execFile } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { basename, join } from 'node:path';
import { AlreadyExistsError, InternalError, InvalidArgumentError, NotFoundError } from '../../domain/errors.js';
import type { ImageDetails, ImageInfo, ImageProgress } from '../../ports/guest-images.js';
import type { ImageSource, ImportRules, RegistrySource } from '../../domain/image-request.js';
import { checkImportFile } from './import-files.js';
import { bundleOf, checkBundle, imageDigest } from './image-bundle.js';
import type { ImageBundle } from '../../domain/image-fetch.js';
import { archiveSource, importContainer, importDisk, type ImportMeta } from './image-import.js';
import { registrySource } from './registry-pull.js';
import { readyDisk } from './disk-unpack.js';
import { imageEntrypoint } from './oci-layout.js';
import type { ImageManifest } from './image-manifest.js';
import { AGENT_DIR, BUILD_SCRIPT, BUILTIN_IMAGES, builtinInputs, ImageBuilds, runBuild } from './image-builds.js';
import { buildWithDisk, dropOlderBuilds, OLDER_BUILDS, olderBuilds } from './older-builds.js';
import { backingIn } from './qcow2-backing.js';

const entrypointOf = (m: ImageManifest) => {
  const entrypoint = m.runs_entrypoint ? imageEntrypoint(m.image_config) : undefined;
  return entrypoint ? { entrypoint } : {};
};

export interface ResolvedImage extends ImageManifest {
  dir: string;
}

/**
 * The least memory of an image whose manifest does not say: the project's kernel is loaded whole
 * (66 MB), so below 128 MB a guest never prints a line (64 MB was tried: silence until the agent
 * timeout). Images built from a built-in one take its minimum.
 */
export const DEFAULT_MIN_MEMORY_MB = 128;

function minMemory(m: { min_memory_mb?: number; source?: string }): number {
  const base = m.source?.replace(/^recipe:/, '') ?? '';
  return m.min_memory_mb ?? BUILTIN_IMAGES[base]?.min_memory_mb ?? DEFAULT_MIN_MEMORY_MB;
}
/** `default` names the default image. */
export const IMAGE_ALIASES: Record<string, string> = { default: 'debian' };

const ID = /^[a-z0-9][a-z0-9._-]{0,62}$/;

/**
 * The images the QEMU adapter can boot, one directory each with a manifest written last: the
 * built-in ones (built on first use, `ImageBuilds`), and those baked from VMs, imported from
 * files or fetched from another node, each made in a temporary directory renamed into place.
 */
export class ImageCatalog {
  private readonly builds: ImageBuilds;
  /** The start's sweep of temporary directories crashed makers left (its names, for tests). */
  readonly swept: Promise<string[]>;

  /** `buildScript`: what builds a built-in image (image/build-image.sh; a test's stand-in). */
  constructor(
    readonly root: string,
    buildScript = BUILD_SCRIPT,
  ) {
    this.builds = new ImageBuilds(root, (id) => this.dir(id), buildScript);
    // What a daemon killed while making an image left: gone in the background.
    this.swept = this.builds.sweep();
  }

  dir(id: string): string {
    return join(this.root, id);
  }

  /** The image's id after aliases; InvalidArgumentError for a malformed name. */
  canonical(name: string): string {
    const id = IMAGE_ALIASES[name] ?? name;
    if (!ID.test(id))
      throw new InvalidArgumentError(
        `invalid image name ${JSON.stringify(name)}: lowercase letters, digits, '.', '_' and '-', at most 63`,
      );
    return id;
  }

  private manifest(id: string): ImageManifest | undefined {
    const path = join(this.dir(id), 'manifest.json');
    if (!existsSync(path)) return undefined;
    try {
      return JSON.parse(readFileSync(path, 'utf8')) as ImageManifest;
    } catch (err) {
      throw new InternalError(`image ${id}: unreadable manifest: ${(err as Error).message}`);
    }
  }

  /** What a create needs to know, built or not. InvalidArgumentError for an unknown image. */
  info(name: string): ImageInfo {
    const id = this.canonical(name);
    const m = this.manifest(id);
    // A built-in image being built again is not built for creates: they wait for the new one.
    if (m && !this.rebuilding(id))
      return {
        id,
        agent_ready: m.agent_ready,
        ssh_user: m.ssh_user,
        min_disk_gb: m.disk_gb,
        min_memory_mb: minMemory(m),
        built: true,
        revision: `${statSync(join(this.dir(id), 'manifest.json')).mtimeMs}/${m.agent_version ?? ''}`,
        ...this.outdated(id, m),
        ...entrypointOf(m),
      };
    const b = BUILTIN_IMAGES[id];
    if (!b)
      throw new InvalidArgumentError(
        `unknown image "${name}" (built-in: ${Object.keys(BUILTIN_IMAGES).join(', ')}; GET /images lists what is built)`,
      );
    return {
      id,
      agent_ready: true,
      ssh_user: 'root',
      min_disk_gb: b.min_disk_gb,
      min_memory_mb: b.min_memory_mb,
      build_estimate_ms: this.builds.estimate(id),
      built: false,
      // the one here is being built again
      ...(m ? { outdated: true } : {}),
    };
  }

  /** True while a built-in image that is built is being built again. */
  private rebuilding(id: string): boolean {
    return !!BUILTIN_IMAGES[id] && this.builds.has(id);
  }

  /** `{outdated: true}` for a built-in image built from other inputs than this daemon's. */
  private outdated(id: string, m: ImageManifest): { outdated?: true } {
    const now = BUILTIN_IMAGES[id] ? builtinInputs() : undefined;
    return now && m.inputs_digest !== now ? { outdated: true } : {};
  }

  /**
   * A built image's files; builds a built-in image that is missing (or joins its build again).
   * `standing`, a VM's disk: the build of the image that disk stands on (older-builds.ts), which
   * is there, even while a newer one is being built.
   */
  async get(name: string, standing?: string): Promise<ResolvedImage> {
    const id = this.canonical(name);
    const dir = this.dir(id);
    let current = this.manifest(id);
    const on = standing && current ? await backingIn(standing, dir) : undefined;
    if (!on && (!current || this.rebuilding(id))) {
      await this.ensure(id);
      current = this.manifest(id);
    }
    if (!current) throw new InvalidArgumentError(`unknown image "${name}"`);
    const m = on ? buildWithDisk(dir, current, on) : current;
    for (const f of m.boot === 'firmware' ? [m.disk] : [m.kernel, m.disk]) {
      if (!existsSync(join(dir, f))) throw new InternalError(`image ${id} is incomplete: ${f} missing`);
    }
    return { ...m, id, dir };
  }

  /** Makes sure the image is built; a built-in one that is missing is built, once, with progress. */
  async ensure(name: string, progress?: (p: ImageProgress) => void): Promise<void> {
    const id = this.canonical(name);
    if (this.manifest(id) && !this.rebuilding(id)) return;
    if (!BUILTIN_IMAGES[id]) throw new InvalidArgumentError(`unknown image "${name}"`);
    await this.builds.ensure(id, progress);
  }

  /**
   * Builds a built-in image again from this daemon's inputs; the new one is the image when
   * complete, and creates of it wait for that meanwhile. VMs that stand on the one it replaces
   * keep it (older-builds.ts) until `forgetOlderBuilds`.
   */
  async rebuild(name: string): Promise<void> {
    const id = this.canonical(name);
    if (!BUILTIN_IMAGES[id]) throw new InvalidArgumentError(`image ${id} is not built-in: only those are built again`);
    await this.builds.ensure(id);
  }

  /**
   * Removes the older builds of images that no VM stands on any more. `standing(id)`: the disks of
   * the VMs made from image `id`; an image with a disk whose build cannot be told keeps them all.
   * Returns the ids of the images it removed builds of.
   */
  async forgetOlderBuilds(standing: (id: string) => string[]): Promise<string[]> {
    const cleaned: string[] = [];
    for (const id of await readdir(this.root).catch(() => [] as string[])) {
      const m = id.startsWith('.') ? undefined : this.manifest(id);
      const dir = this.dir(id);
      if (!m || this.builds.has(id) || !existsSync(join(dir, OLDER_BUILDS))) continue;
      const on = await Promise.all(standing(id).map((disk) => backingIn(disk, dir)));
      if (on.some((f) => f === undefined)) continue;
      const used = new Set(on.map((f) => basename(f!)));
      if ((await dropOlderBuilds(dir, m, used)).length) cleaned.push(id);
    }
    return cleaned;
  }

  /** Every built image. */
  async list(inUse: (id: string) => string[] = () => []): Promise<ImageDetails[]> {
    const names = await readdir(this.root).catch(() => [] as string[]);
    const out: ImageDetails[] = [];
    for (const id of names.sort()) {
      if (id.startsWith('.')) continue;
      const d = await this.details(id, inUse).catch(() => undefined);
      if (d) out.push(d);
    }
    return out;
  }

  /**
   * The content digest of a built image's disk, kernel and initrd (image-digest.ts); with
   * `standing`, a VM's disk, of the build it stands on.
   */
  async digest(name: string, standing?: string): Promise<string> {
    const id = this.canonical(name);
    const m = this.manifest(id);
    if (!m) throw new NotFoundError(`image ${name} is not built`);
    const on = standing && (await backingIn(standing, this.dir(id)));
    return imageDigest(this.dir(id), on ? buildWithDisk(this.dir(id), m, on) : m);
  }

  /** A built image's files for another node: its manifest and what it boots from. */
  async bundle(name: string): Promise<ImageBundle & { paths: Record<string, string> }> {
    const id = this.canonical(name);
    const m = this.manifest(id);
    if (!m) throw new NotFoundError(`image ${name} is not built`);
    return bundleOf(this.dir(id), id, m);
  }

  /** An image fetched from another node, checked file by file and as a whole before it is put in place. */
  async installImage(bundle: ImageBundle, fill: (dir: string) => Promise<void>): Promise<void> {
    const id = this.canonical(bundle.id);
    if (this.manifest(id)) throw new AlreadyExistsError(`image ${id} is built here already`);
    await mkdir(this.root, { recursive: true });
    // Kept when the fetch is cut off: the next one resumes from what is there.
    const stage = join(this.root, `.fetch-${id}`);
    await mkdir(stage, { recursive: true });
    await fill(stage);
    await checkBundle(stage, { ...bundle, id });
    await rename(stage, this.dir(id));
  }

  async details(name: string, inUse: (id: string) => string[] = () => []): Promise<ImageDetails> {
    const id = this.canonical(name);
    const m = this.manifest(id);
    if (!m) throw new NotFoundError(`image ${name} is not built`);
    const dir = this.dir(id);
    let size = 0;
    // (a file an older build's cleanup removes meanwhile counts for nothing, not as an error)
    for (const f of await readdir(dir)) size += (await stat(join(dir, f)).catch(() => undefined))?.size ?? 0;
    const older = olderBuilds(dir, m);
    return {
      id,
      os: m.os ?? 'unknown',
      description: m.description ?? '',
      size_bytes: size,
      created_at: (await stat(join(dir, 'manifest.json'))).mtime.toISOString(),
      agent_ready: m.agent_ready,
      boot: m.boot ?? 'kernel',
      source: m.source ?? id,
      min_disk_gb: m.disk_gb,
      min_memory_mb: minMemory(m),
      ssh_user: m.ssh_user,
      built: true,
      ...this.outdated(id, m),
      in_use_by: inUse(id),
      ...entrypointOf(m),
      ...(older.length ? { older_builds: older.length } : {}),
    };
  }

  /**
   * A new image from a VM's disk: flattened into a fresh qcow2 (the backing image and what the VM
   * wrote; its snapshots stay behind), with the base image's kernel, initramfs and boot settings.
   * Made in a temporary directory and renamed into place.
   */
  async bake(
    name: string,
    vmDisk: string,
    meta: { from_image: string; description: string; source: string },
  ): Promise<void> {
    const id = this.canonical(name);
    if (this.manifest(id)) throw new AlreadyExistsError(`image ${id} already exists`);
    await this.builds.holding(id, async () => {
      // the build the VM stands on: its kernel goes with its disk
      const base = await this.get(meta.from_image, vmDisk);
      const tmp = this.builds.tempDir(id);
      try {
        await mkdir(tmp, { recursive: true });
        await runBuild(['qemu-img', 'convert', '-q', '-O', 'qcow2', vmDisk, join(tmp, 'disk.qcow2')], () => undefined);
        for (const f of [base.kernel, base.initrd]) if (f) await copyFile(join(base.dir, f), join(tmp, f));
        const { dir: _d, ...manifest } = base;
        const sizeGb = await virtualSizeGb(join(tmp, 'disk.qcow2'));
        await writeFile(
          join(tmp, 'manifest.json'),
          JSON.stringify(
            {
              ...manifest,
              id,
              disk: 'disk.qcow2',
              disk_gb: sizeGb,
              description: meta.description,
              source: meta.source,
              // A baked image needs what its base needed (its kernel and init are the base's).
              min_memory_mb: minMemory(manifest),
            },
            null,
            2,
          ) + '\n',
        );
        if (this.manifest(id)) throw new AlreadyExistsError(`image ${id} already exists`);
        await rename(tmp, this.dir(id));
      } catch (err) {
        await rm(tmp, { recursive: true, force: true });
        throw err;
      }
    });
  }

  /**
   * A new image from a file on the host (`oci-archive:`, `docker-archive:`, `disk:`), read only
   * inside `rules.dirs` (import_dirs), from a registry (`docker://`), or a disk from its URL. Made
   * in a temporary directory and renamed into place, so a refused or failed import leaves nothing.
   */
  async import(
    name: string,
    source: ImageSource,
    rules: ImportRules,
    meta: Omit<ImportMeta, 'id'>,
    progress: (p: ImageProgress) => void,
  ): Promise<void> {
    const id = this.canonical(name);
    if (this.manifest(id) || this.builds.has(id)) throw new AlreadyExistsError(`image ${id} already exists`);
    const file = 'path' in source ? await checkImportFile(source.path, rules.dirs) : undefined;
    const tmp = this.builds.tempDir(id);
    const work = `${tmp}.work`;
    await this.builds.holding(id, async () => {
      try {
        await mkdir(this.root, { recursive: true });
        await mkdir(work, { recursive: true });
        if (source.type === 'disk' || source.type === 'url') {
          const disk = await readyDisk(source.type === 'url' ? source : { type: 'disk', file: file! }, work, progress);
          await importDisk(disk.file, tmp, { ...meta, id }, disk.progress, disk.label);
        } else {
          const from =
            source.type === 'docker'
              ? await registrySource(source, work, rules.insecureRegistries)
              : await archiveSource(file!, source.type, work);
          await importContainer(
            from,
            tmp,
            work,
            { ...meta, id },
            { script: BUILD_SCRIPT, agentDir: AGENT_DIR, run: runBuild },
            progress,
          );
        }
        if (this.manifest(id)) throw new AlreadyExistsError(`image ${id} already exists`);
        await rename(tmp, this.dir(id));
        progress({ percent: 100, message: `image ${id} imported` });
      } catch (err) {
        await rm(tmp, { recursive: true, force: true });
        throw err;
      } finally {
        await rm(work, { recursive: true, force: true });
      }
    });
  }

  /** What a pull of `source` would take now: its manifest's digest, checked as for a pull. */
  async registryDigest(source: RegistrySource, insecureRegistries: readonly string[]): Promise<string> {
    await mkdir(this.root, { recursive: true });
    // a login goes in an auth file, in a folder of its own that goes with it
    const work = await mkdtemp(join(this.root, '.resolve-'));
    try {
      return (await registrySource(source, work, insecureRegistries)).digest;
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }

  /** Removes a built image. NotFoundError when it is not built. */
  async remove(name: string): Promise<void> {
    const id = this.canonical(name);
    if (!this.manifest(id)) throw new NotFoundError(`image ${name} is not built`);
    await rm(this.dir(id), { recursive: true, force: true });
  }
}

/** A qcow2's virtual size in whole GB (rounded up). */
async function virtualSizeGb(path: string): Promise<number> {
  const { stdout } = await promisify(execFile)('qemu-img', ['info', '--output=json', path]);
  return Math.ceil((JSON.parse(stdout) as { 'virtual-size': number })['virtual-size'] / 2 ** 30);
}
