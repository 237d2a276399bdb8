import type { EgressPolicy } from '../domain/egress.js';
import type { AdapterState, Forward, Mount, PortForward } from '../domain/vm.js';

export type { AdapterState } from '../domain/vm.js';

/** Everything an adapter needs to provision and boot one VM. Plain data. */
export interface VmSpec {
  name: string;
  /** Directory the adapter may use for disks, sockets and logs; created by the store. */
  dir: string;
  cpus: number;
  memory_mb: number;
  disk_gb: number;
  image: string;
  hostname: string;
  userdata?: string;
  /** Forwards to open with the VM (host_port 0: the adapter picks one). */
  forwards: PortForward[];
  mounts: Mount[];
  /** The daemon's SSH public key, authorised for the guest's default user. */
  ssh_authorized_key?: string;
  /** Address on the overlay segment (network: overlay), as `10.77.0.N/24`; none in user mode. */
  overlay_ip?: string;
  /**
   * What the guest may reach beyond its network (docs/network.md); the adapter's network enforces
   * it from the guest's first packet. Omitted: nothing.
   */
  egress?: EgressPolicy;
}

/** What a running VM looks like from the host. */
export interface VmHandle {
  ip: string;
  ssh_port: number;
  agent_port: number;
  agent_cid: number;
  /** A Unix socket that reaches the agent by hybrid vsock (`AgentEndpoint.socket`), for drivers whose VMM has one. */
  agent_socket?: string;
  /** Its forwards, each with the process that carries it. */
  forwards: Forward[];
  /** The VM's process. */
  pid?: number;
  /** The guest was resumed from a snapshot rather than cold-booted. */
  restored_from_snapshot: boolean;
  /** A restore that cold-booted instead: why (the saved state did not load, or could not be used). */
  cold_boot_reason?: string;
  /** The adapter's own data for `reattach`; the daemon keeps it in the record without reading it. */
  state: AdapterState;
}

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
  /** Its snapshots (the daemon adds them; an adapter leaves this out). */
  snapshots?: ImageSnapshotInfo[];
}

/** An image's snapshot as GET /images shows it (ImageSnapshotRecord without its keys). */
export interface ImageSnapshotInfo {
  cpus: number;
  memory_mb: number;
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

export interface LaunchOptions {
  /** Start from the `svc-suspend` snapshot when one exists (restore); otherwise cold boot. */
  restore?: boolean;
  /**
   * Nobody waits on this VM yet (a warm pool member being filled): the adapter may run it at a
   * lower CPU priority, so VMs people are waiting on get the host's CPU first.
   */
  background?: boolean;
}

export type ExitListener = (name: string, reason: string) => void;

/** Names one VM to the adapter: its name and the directory the store gave it. */
export interface VmRef {
  name: string;
  dir: string;
}

export const Hypervisor = Symbol('Hypervisor');
/**
 * The lifecycle of VM processes. The control plane owns state; the adapter only drives processes
 * and never touches the VM store. Unless noted, methods throw InternalError on host
 * failures and InvalidStateError when the VM is not in the state the verb needs.
 */
export interface Hypervisor {
  /** Adapter name reported by /info ("qemu", "fake"). */
  readonly kind: string;

  /**
   * Starts the VM process, detached so it outlives the daemon (where the adapter can). Resolves
   * once the process runs. AlreadyExistsError for a busy host port. Not idempotent.
   */
  launch(spec: VmSpec, options?: LaunchOptions): Promise<VmHandle>;

  /**
   * Stops the VM: graceful power-off, then kill after `timeoutMs`, and forgets any suspend
   * snapshot so the next launch cold-boots. Idempotent: a VM that is not running resolves.
   */
  stop(vm: VmRef, timeoutMs: number): Promise<void>;

  /** Kills the process at once. Idempotent. */
  kill(vm: VmRef): Promise<void>;

  /** Freezes the guest CPUs; the process stays. */
  pause(vm: VmRef): Promise<void>;

  /** Continues a paused guest. */
  resume(vm: VmRef): Promise<void>;

  /**
   * Saves a snapshot (best effort) and stops the process, freeing host RAM. Resolves with whether
   * a snapshot was written; a later `launch(spec, {restore: true})` loads it.
   */
  suspend(vm: VmRef, options?: SaveOptions): Promise<{ snapshot: boolean }>;

  /**
   * Finds a VM's process again after a daemon restart, from the handle the record kept. Returns
   * null when the process is gone (or its pid now belongs to something else). Never throws.
   * `spec` is the VM as its record describes it (what a start would launch): the adapter holds it
   * as a launch's, for what it does later (the shares a save unplugs, the RAM image it makes).
   */
  reattach(spec: VmSpec, handle: VmHandle): Promise<VmHandle | null>;

  /**
   * Does the VM, whose process is not running, hold a complete saved state that a restore would
   * load? True after a suspend the adapter finished even if the daemon did not get to record it.
   */
  hasSavedState(vm: VmRef): Promise<boolean>;

  /** Removes everything the adapter made for the VM (disk, sockets). Kills first. Idempotent. */
  destroy(vm: VmRef): Promise<void>;

  /**
   * What a saved state of this driver depends on beyond the VM's image and shape: the VMM's
   * version, machine type, accelerator and the devices its config adds. Saved states with equal
   * keys (and images and shapes) load alike, so a snapshot made under one serves creates under the
   * same key (snapshot creates, docs/snapshot-creates.md). Absent: the driver cannot restore
   * copies of a saved state made on a smaller disk, and every create boots.
   */
  savedStateKey?(): Promise<string>;

  /** Subscribes to unexpected process exits (not those asked for by stop/kill/suspend/destroy). */
  onExit(listener: ExitListener): void;

  /**
   * The daemon is stopping: let go of the VMs. Detached processes (QEMU) keep running for the
   * next daemon to re-attach; processes that cannot outlive the daemon are stopped. Idempotent.
   */
  release(): Promise<void>;
}

/** What a suspend or a capture is told of the guest it saves. */
export interface SaveOptions {
  /** Its guest let go of its shares (HostLinks `releaseMounts` ran and succeeded). */
  sharesReleased?: boolean;
}

export const VmDisks = Symbol('VmDisks');
/** A VM's disk and the files beside it. */
export interface VmDisks {
  /** Creates the VM's disk and seed in `spec.dir`. Not idempotent: call once per VM. */
  provision(spec: VmSpec): Promise<void>;

  /**
   * Gives `spec` a disk with the template's content (its saved state included) and writes the new
   * VM's own seed: a copy, or shared files that outlive the template (QEMU shares them; see
   * docs/suspend-and-clones.md). Resolves with whether the new VM has a saved state a
   * `launch(spec, {restore: true})` will start from. The template must not run meanwhile (the
   * caller holds its lock), and its later deletion must not affect the clone. Not idempotent.
   */
  clone(template: VmRef, spec: VmSpec, capture?: string): Promise<{ snapshot: boolean }>;

  /**
   * Captures a running or paused VM for forks: its guest is paused only while its disk is frozen
   * into a layer and its memory and devices are saved beside it, then runs on (or stays paused) as
   * it was. Resolves with the capture's id, which `clone(vm, spec, id)` gives each fork (as a
   * template's saved state is given to a clone), and how long the guest was held. The VM's later
   * writes are not seen by its forks. InvalidStateError when it does not run; NotSupportedError
   * where the driver cannot. Not idempotent: each call is a new capture. `forks`: how many forks
   * will stand on it (a driver may then share their memory, as QEMU's does with a RAM image).
   * A VM with shares is captured only once its guest let go of them (`sharesReleased`): they are
   * unplugged for the capture and plugged in again after it, for the guest to mount again.
   */
  capture(vm: VmRef, forks?: number, options?: SaveOptions): Promise<{ id: string; paused_ms: number }>;

  /**
   * Forgets a capture once its forks have their own links to it (or failed): the files go from
   * the VM's directory, and with the last fork that holds them. Idempotent.
   */
  dropCapture(vm: VmRef, id: string): Promise<void>;

  /**
   * Follows a VM to a new name (a claimed warm pool member), running or not; the store has already
   * moved its directory to `to.dir`. Not idempotent.
   */
  rename(from: VmRef, to: VmRef): Promise<void>;

  /**
   * Takes in a stopped or suspended VM whose files came from another node (a move): its disk is
   * made to stand on this node's copy of its image (the caller checked their digests agree) and
   * its seed is written for this node (its SSH key). `suspended`: it holds a saved state to load.
   */
  takeIn(spec: VmSpec, suspended: boolean): Promise<void>;
}

import type { ImageSource } from '../domain/image-request.js';
import type { ImageBundle } from '../domain/image-fetch.js';

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

  /** Every built image; `inUse` says which VMs stand on an image id. */
  listImages(inUse: (id: string) => string[]): Promise<ImageDetails[]>;

  /** One built image. NotFoundError when it is not built. */
  getImage(image: string, inUse: (id: string) => string[]): Promise<ImageDetails>;

  /**
   * The content digest of a built image (`sha256:` of its disk, kernel and initrd): two nodes whose
   * digests agree have the same bytes, so a VM's disk made on one stands on the other's copy.
   * NotFoundError when it is not built.
   */
  digest(image: string): Promise<string>;

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
   * bootloader), read only when its real path lies inside one of `allowed`. Appears whole or not
   * at all, reporting progress. InvalidArgumentError for a path outside `allowed`, a link leading
   * out, or a file that is not what its type says (nothing is left behind); AlreadyExistsError
   * when `id` is built; InternalError when a build step fails. Not idempotent.
   */
  importImage(
    id: string,
    source: ImageSource,
    allowed: readonly string[],
    meta: { ssh_user?: string; description?: string },
    progress: (p: ImageProgress) => void,
  ): Promise<void>;
}

/** Which host folders may be shared: inside one of `allowed`, and clear of every `forbidden` one. */
export interface MountRule {
  allowed: readonly string[];
  forbidden: readonly string[];
}

export const HostLinks = Symbol('HostLinks');
/** What joins a VM to the host: host folders shared into it and host ports forwarded to it. */
export interface HostLinks {
  /**
   * Checks mounts before anything is made: InvalidArgumentError when a host path is not an
   * existing directory or breaks the rule (links resolved), NotSupportedError when the configured
   * mount driver is missing here. Resolves with the mounts as they will be shared (real host
   * paths). Idempotent (it only reads).
   */
  checkMounts(mounts: Mount[], rule: MountRule): Promise<Mount[]>;

  /**
   * The script (run as root in the guest, through its agent) that mounts `mounts` in a guest that
   * woke from a saved state rather than booted: a launch that loads one adds the shares once the
   * guest runs, and the guest mounts them when told. Absent, or undefined for these mounts, where
   * shares are attached only at boot: a clone cannot take them, and a create with them boots.
   */
  mountsAfterRestore?(mounts: Mount[]): string | undefined;

  /**
   * Its pair, where it is given: the script a running guest runs before it is saved to let go of
   * its shares (unmounted; exits non-zero when one is busy). A suspend told they were let go
   * (`sharesReleased`) unplugs them and saves the guest, which is given them again as it wakes;
   * otherwise a VM with shares is not saved.
   */
  releaseMounts?(mounts: Mount[]): string | undefined;

  /**
   * Given with `releaseMounts`: plugs in again the shares of a running VM whose save unplugged them
   * and was not finished (its daemon died between); those still in are left as they are.
   */
  giveSharesBack?(vm: VmRef, mounts: Mount[]): Promise<void>;

  /**
   * Adds host forwards to a running VM, as create-time forwards are (127.0.0.1, host_port 0 is
   * allocated). Resolves with the VM's handle with the new forwards in it. AlreadyExistsError for
   * a busy host port; InvalidStateError when the VM is not running. Not idempotent.
   */
  addForwards(vm: VmRef, forwards: PortForward[]): Promise<VmHandle>;
}

/** One adapter that offers every hypervisor capability (what an embedder may hand the daemon). */
export type HypervisorAdapter = Hypervisor & VmDisks & GuestImages & HostLinks;
