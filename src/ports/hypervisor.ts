import type { EgressPolicy } from '../domain/egress.js';
import type { ProcessStart } from '../domain/processes.js';
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
  /**
   * What its guest's agent starts at each cold boot (ImageInfo.entrypoint, unless the create said
   * `entrypoint: false`); the adapter hands it to the guest with the seed.
   */
  entrypoint?: ProcessStart;
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

export interface LaunchOptions {
  /** Start from the `svc-suspend` snapshot when one exists (restore); otherwise cold boot. */
  restore?: boolean;
  /**
   * With `restore`: the loaded guest stays paused (its CPUs run at `resume`), as a paused VM moved
   * to another node was. A launch that cold-boots instead runs its guest (`restored_from_snapshot`
   * false says so).
   */
  paused?: boolean;
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
   * The most vCPUs one VM may have here (QEMU: the host's CPUs unless configured, as docker's
   * `--cpus` is held to them); a create or an edit asking for more is refused. Unset: no limit
   * beyond the request's own.
   */
  readonly maxCpus?: number;

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

  /**
   * Grows the disk of a VM whose process is not running to `gb` GiB (a disk never shrinks: a
   * smaller `gb` is an InvalidArgumentError). Its guest grows its root filesystem into it at its
   * next boot. Absent: the driver cannot, and a VM's disk keeps the size it was made with.
   */
  growDisk?(vm: VmRef, gb: number): Promise<void>;

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
  /**
   * A suspend for a move: the saved state stays as it was saved. Nothing that only speeds up later
   * restores here is made of it (QEMU's RAM image): the node it goes to restores it once.
   */
  forMove?: boolean;
}

export const VmDisks = Symbol('VmDisks');
/** A VM's disk and the files beside it. */
export interface VmDisks {
  /** Creates the VM's disk and seed in `spec.dir`. Not idempotent: call once per VM. */
  provision(spec: VmSpec): Promise<void>;

  /**
   * Gives `spec` a disk with the template's content (its saved state included) and writes the new
   * VM's own seed: a copy, or shared files that outlive the template (QEMU shares them; see
   * docs/suspend-and-clones.md). `capture`: a capture of the running template (a fork), or
   * `snapshot:<name>` (domain/snapshots.ts) for the template as its named snapshot holds it,
   * whatever the template does now. Resolves with whether the new VM has a saved state a
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
   * Keeps the VM as it is now under the name `snapshot` (docs/snapshots.md), beside it and with
   * it (a rename takes it along, a destroy removes it). `capture`: the capture just taken of the
   * running VM (its memory goes into the snapshot; the caller drops the capture after); without
   * one the VM does not run, and its disk is kept, with its saved state when it is suspended.
   * Resolves with whether the snapshot holds a guest's memory. The name must be free (a leftover
   * of a call that did not finish is replaced). Not idempotent. Absent: the driver has none.
   */
  snapshot?(vm: VmRef, snapshot: string, capture?: string): Promise<{ memory: boolean }>;

  /**
   * Puts the VM, whose process is not running, back to `snapshot`: its disk is the snapshot's, and
   * its saved state the snapshot's memory (a `launch(spec, {restore: true})` resumes it) or none.
   * Every step leaves a VM that starts: the disk is swapped in one rename before the state is laid
   * beside it. The snapshot stays. Resolves with whether a saved state was laid.
   */
  revert?(vm: VmRef, snapshot: string): Promise<{ memory: boolean }>;

  /** Forgets a snapshot: its files go (layers other snapshots or the VM stand on stay). Idempotent. */
  dropSnapshot?(vm: VmRef, snapshot: string): Promise<void>;

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

  /**
   * Why the VM's disk would not open as it is (a file its chain of layers stands on is gone: the
   * image it was made on moved or was removed), or undefined when it opens. Only reads; the VM
   * may run. Absent: the driver cannot tell.
   */
  diskFault?(vm: VmRef): Promise<string | undefined>;

  /**
   * Puts the VM's disk back on its image (`image`, an id) when the image's file moved with the
   * images folder: the same build, found at the image's path now. Nothing when its chain is whole;
   * InvalidStateError saying why when it cannot (another build there, or none that it knows). The
   * VM must not run. Absent: the driver's disks do not name their image's file. (`launch` does this
   * itself; this is for a disk a launch does not start first, as an image snapshot's.)
   */
  restand?(vm: VmRef, image: string): Promise<void>;
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
