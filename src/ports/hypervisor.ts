import type { Mount, Proto } from '../domain/instance.js';

export interface BootForwardSpec {
  /** 0 asks the adapter to allocate a free host port. */
  host_port: number;
  guest_port: number;
  proto: Proto;
}

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
  forwards: BootForwardSpec[];
  mounts: Mount[];
  /** The daemon's SSH public key, authorised for the guest's default user. */
  ssh_authorized_key?: string;
  /** Address on the overlay segment (network: overlay), as `10.77.0.N/24`; none in user mode. */
  overlay_ip?: string;
}

/** What a running VM looks like from the host. `runtime` is opaque adapter state kept in the record. */
export interface VmHandle {
  ip: string;
  ssh_port: number;
  agent_port: number;
  agent_cid: number;
  forwards: { host_port: number; guest_port: number; proto: Proto }[];
  pid?: number;
  runtime: Record<string, unknown>;
}

export interface ImageInfo {
  id: string;
  /** The image starts svc-agent by itself, so `wait=auto` means agent readiness. */
  agent_ready: boolean;
  ssh_user: string;
}

export interface LaunchOptions {
  /** Start from the `svc-suspend` snapshot when one exists (restore); otherwise cold boot. */
  restore?: boolean;
}

export type ExitListener = (name: string, reason: string) => void;

/** Names one VM to the adapter: its name and the directory the store gave it. */
export interface VmRef {
  name: string;
  dir: string;
}

export const Hypervisor = Symbol('Hypervisor');
/**
 * Drives VM processes. The control plane (InstanceService) owns state; the adapter only drives.
 * Methods take the VM name and the spec or handle they need; none of them touches the instance
 * store. Unless noted, methods throw InternalError on host failures.
 */
export interface Hypervisor {
  /** Adapter name reported by /info ("qemu", "fake"). */
  readonly kind: string;

  /** Resolves an image name. Throws InvalidArgumentError when the image does not exist. */
  resolveImage(image: string): Promise<ImageInfo>;

  /**
   * Checks mounts before anything is made: InvalidArgumentError when a host path is not an
   * existing directory, NotSupportedError when the configured mount driver is missing here.
   */
  checkMounts(mounts: Mount[]): Promise<void>;

  /** Creates the VM's disk and seed in `spec.dir`. Not idempotent: call once per VM. */
  provision(spec: VmSpec): Promise<void>;

  /**
   * Makes `spec`'s disk a copy of the template's (its suspend snapshot included) and writes the
   * new VM's own seed. Resolves with whether the copy holds a snapshot a `launch(spec, {restore:
   * true})` will start from. The template must not run meanwhile (the caller holds its lock).
   * Not idempotent.
   */
  clone(template: VmRef, spec: VmSpec): Promise<{ snapshot: boolean }>;

  /** Starts the VM process, detached so it outlives the daemon. Resolves once the process runs. */
  launch(spec: VmSpec, options?: LaunchOptions): Promise<VmHandle>;

  /**
   * Stops the VM: graceful power-off, then kill after `timeoutMs`, and forgets any suspend
   * snapshot marker so the next launch cold-boots. Idempotent: a VM that is not running resolves.
   */
  stop(vm: VmRef, timeoutMs: number): Promise<void>;

  /** Kills the process at once. Idempotent. */
  kill(vm: VmRef): Promise<void>;

  /** Freezes the guest CPUs (monitor `stop`); the process stays. */
  pause(vm: VmRef): Promise<void>;

  /** Continues a paused guest (monitor `cont`). */
  resume(vm: VmRef): Promise<void>;

  /**
   * Saves a snapshot (best effort) and stops the process, freeing host RAM. Resolves with whether
   * a snapshot was written; a later `launch(spec, {restore: true})` loads it.
   */
  suspend(vm: VmRef): Promise<{ snapshot: boolean }>;

  /**
   * Re-attaches to a VM process after a daemon restart, from the handle saved in the record.
   * Returns null when the process is gone (or the pid was recycled by something else).
   */
  reattach(vm: VmRef, handle: VmHandle): Promise<VmHandle | null>;

  /**
   * Follows a VM to a new name (a claimed warm pool member), running or not; the store has already
   * moved its directory to `to.dir`. Not idempotent.
   */
  rename(from: VmRef, to: VmRef): Promise<void>;

  /**
   * Adds host forwards to a running VM, as create-time forwards are (127.0.0.1, host_port 0 is
   * allocated). Resolves with the forwards as bound. AlreadyExistsError for a busy host port.
   */
  addForwards(vm: VmRef, forwards: BootForwardSpec[]): Promise<BootForwardSpec[]>;

  /** Removes everything the adapter made for the VM (disk, sockets). Kills first. Idempotent. */
  destroy(vm: VmRef): Promise<void>;

  /** Subscribes to unexpected process exits (not those asked for by stop/kill/suspend). */
  onExit(listener: ExitListener): void;
}
