import type { ImageBundle } from '../domain/image-fetch.js';
import type { ProcessStart } from '../domain/processes.js';
import type { EntrypointChoice } from '../domain/restart-policy.js';
import type { ImageSource, ImportRules, RegistrySource } from '../domain/image-request.js';
import type { VmRef } from './hypervisor.js';

export interface ImageInfo {
  /** The image's id, aliases resolved (`default` names `debian`). */
  id: string;
  /** The image starts svc-agent by itself, so `wait=auto` means agent readiness. */
  agent_ready: boolean;
  ssh_user: string;
  /** The smallest disk a VM of this image may have (the image's own size). */
  min_disk_gb: number;
  /**
   * The least memory a VM of this image boots in (its kernel must fit, then its init and agent);
   * a create below it is refused at once instead of hanging until the agent timeout.
   */
  min_memory_mb?: number;
  /** For an image not built yet: how long its last build on this host took (none when never built). */
  build_estimate_ms?: number;
  /** False for a built-in image not built yet (the first create builds it, with progress). */
  built: boolean;
  /** Changes whenever the image is built again (its manifest's time and agent version); built images only. */
  revision?: string;
  /**
   * A built-in image built by another svc than this one (its recipe or its agent changed since):
   * its guests run the agent of then, which may lack what this daemon asks of it.
   */
  outdated?: boolean;
  /**
   * What its guest's agent starts at each cold boot, as a process tagged `entrypoint` (a
   * container image's Entrypoint and Cmd); none for images that name no command.
   */
  entrypoint?: ProcessStart;
}

/** A built image, as GET /images shows it. */
export interface ImageDetails extends ImageInfo {
  os: string;
  description: string;
  size_bytes: number;
  created_at: string;
  /** `kernel`: the project's kernel booted directly; `firmware`: the disk's own bootloader. */
  boot: 'kernel' | 'firmware';
  /** What it was made from: `debian`, `minimal`, a recipe's base, a VM. */
  source: string;
  /** VMs (templates and warm pool members included) whose disks stand on this image. */
  in_use_by: string[];
  /** Older builds of it kept for the VMs that stand on them (it was built anew since); none when 0. */
  older_builds?: number;
  /** Its snapshots (the daemon adds them; an adapter leaves this out). */
  snapshots?: ImageSnapshotInfo[];
}

/** An image's snapshot as GET /images shows it (ImageSnapshotRecord without its keys). */
export interface ImageSnapshotInfo {
  cpus: number;
  memory_mb: number;
  /** Made for creates that run no image entrypoint (`entrypoint: false`), or run it with a restart policy. */
  entrypoint?: EntrypointChoice;
  disk_gb: number;
  size_bytes: number;
  created_at: string;
  capture_ms: number;
}

/** How far an image build is. */
export interface ImageProgress {
  percent: number;
  message: string;
}

export const GuestImages = Symbol('GuestImages');
/** The guest images VMs are made from. */
export interface GuestImages {
  /**
   * Resolves an image name (aliases included) without building anything. InvalidArgumentError when
   * no such image is built or buildable. Idempotent.
   */
  resolveImage(image: string): Promise<ImageInfo>;

  /**
   * Makes sure the image is built: a built-in image that is missing is built (once, however many
   * callers wait), reporting progress. A failed build leaves nothing. InternalError when it fails.
   */
  ensureImage(image: string, progress?: (p: ImageProgress) => void): Promise<void>;

  /**
   * Builds a built-in image again from this daemon's inputs (an `outdated` one); the new one is
   * the image when complete, and creates of it meanwhile wait for it as for a first build. VMs
   * that stand on the build it replaces keep theirs (their disks and kernels) until
   * `forgetOlderBuilds`. InvalidArgumentError for an image that is not built-in. Optional: an
   * adapter whose images are never `outdated` needs none.
   */
  rebuildImage?(image: string): Promise<void>;
  /**
   * Removes the builds kept for VMs (rebuildImage) that no VM stands on any more (`standing`: the
   * VMs made from an image id, templates and pool members included). Returns the ids of the
   * images it removed builds of.
   */
  forgetOlderBuilds?(standing: (id: string) => VmRef[]): Promise<string[]>;
  /** Every built image; `inUse` says which VMs stand on an image id. */
  listImages(inUse: (id: string) => string[]): Promise<ImageDetails[]>;

  /** One built image. NotFoundError when it is not built. */
  getImage(image: string, inUse: (id: string) => string[]): Promise<ImageDetails>;

  /**
   * The content digest of a built image (`sha256:` of its disk, kernel and initrd): two nodes whose
   * digests agree have the same bytes, so a VM's disk made on one stands on the other's copy.
   * With `vm`: of the build that VM's disk stands on (an older one, when the image was built anew
   * since). NotFoundError when it is not built.
   */
  digest(image: string, vm?: VmRef): Promise<string>;

  /**
   * A built image as this node offers it to another (docs/cluster.md, "Images across nodes"): its
   * files with their sizes, sha256 and where they are here. NotFoundError when it is not built.
   */
  bundle(image: string): Promise<ImageBundle & { paths: Record<string, string> }>;

  /**
   * Installs image `bundle.id` fetched from another node: `fill` writes its files into a directory
   * kept across attempts (a fetch cut off resumes there); every file must then have its hash and the
   * image its digest, or nothing is installed (the directory goes). Appears whole or not at all.
   * AlreadyExistsError when it is built here; InternalError when what came is not what was offered.
   */
  installImage(bundle: ImageBundle, fill: (dir: string) => Promise<void>): Promise<void>;

  /**
   * The digest (`sha256:HEX`) of the linux/amd64 manifest a pull of `source` would take now: what
   * its tag points at today (over plain HTTP for `insecureRegistries`, as a pull). InvalidArgumentError,
   * with the registry's words, for what the registry refuses or a registry that does not answer.
   */
  registryDigest(source: RegistrySource, insecureRegistries: readonly string[]): Promise<string>;

  /** Removes a built image (the caller checked that nothing uses it). NotFoundError when not built. */
  removeImage(image: string): Promise<void>;

  /**
   * Bakes a stopped VM's disk (flattened: its image's disk plus what the VM wrote) into a new image
   * `id` with the VM's image's kernel and boot settings. Appears whole or not at all.
   * AlreadyExistsError when `id` is built; not idempotent.
   */
  bakeImage(id: string, vm: VmRef, meta: { from_image: string; description: string; source: string }): Promise<void>;

  /**
   * Imports image `id` from a file on the host (a container image archive, or a disk with its own
   * bootloader), read only when its real path lies inside one of `rules.dirs`, or from a container
   * image in a registry. Appears whole or not at all, reporting progress. InvalidArgumentError for
   * a path outside the folders, a link leading out, a file that is not what its type says, or an
   * image the registry does not give or that is past the bounds (nothing is left behind);
   * AlreadyExistsError when `id` is built; InternalError when a build step fails. Not idempotent.
   */
  importImage(
    id: string,
    source: ImageSource,
    rules: ImportRules,
    meta: { ssh_user?: string; description?: string },
    progress: (p: ImageProgress) => void,
  ): Promise<void>;
}
