import { existsSync, readdirSync } from 'node:fs';
import { appendFile, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { AlreadyExistsError, InternalError, InvalidArgumentError, InvalidStateError } from '../../../domain/errors.js';
import { mountTag, type Mount, type PortForward } from '../../../domain/vm.js';
import { snapshotOfSource } from '../../../domain/snapshots.js';
import { checkHostDirs } from '../host-dirs.js';
import { portFree } from '../free-port.js';
import type {
  ExitListener,
  LaunchOptions,
  SaveOptions,
  MountRule,
  VmHandle,
  VmRef,
  VmSpec,
} from '../../../ports/hypervisor.js';
import type { HypervisorAdapter } from '../../../ports/hypervisor-adapter.js';
import { toState } from '../adapter-state.js';
import { FakeImages } from './fake-images.js';
import type { GuestStandIns } from '../driver.js';
import type { FakeGuests } from './fake-guests.js';
import { InMemoryGuestAgent } from './in-memory-guest-agent.js';
import { InMemorySshProbe } from './in-memory-ssh-probe.js';
import { SNAPSHOTS_FOLDER } from '../../../domain/move.js';

/** Where the fake keeps a VM's named snapshots, in its directory: the folder a move carries (domain/move.ts). */
const FAKE_SNAPSHOTS = SNAPSHOTS_FOLDER;
/** A file in a VM's directory that makes its fake disk one that does not open (diskFault). */
export const FAKE_DISK_FAULT = 'disk-fault';

type FakeState = 'provisioned' | 'running' | 'paused' | 'stopped';

interface FakeVm {
  spec: VmSpec;
  state: FakeState;
  snapshot: boolean;
  bootedAt: number;
  /** The build of its image its disk was made from (FakeImages' revision; a clone's: its template's). */
  build?: number;
  /** The last launch asked for a lower CPU priority. */
  background?: boolean;
  handle?: VmHandle;
  /** Extra process the fake runs for the VM (a local svc-agent), stopped with it. */
  sidecar?: Sidecar;
}

/** What runs beside a fake VM (with fake_agent: a local svc-agent and an SSH server). */
export interface Sidecar {
  port: number;
  pid: number;
  sshPort?: number;
  /** Follows the VM directory to a new place (rename of a running VM). */
  relocate?(dir: string): Promise<void>;
  stop(): Promise<void>;
}

export interface InMemoryHypervisorOptions {
  /** How long after launch the fake guest "answers" (ssh banner, agent health). */
  bootDelayMs?: number;
  /**
   * Starts something per VM on launch (the real svc-agent, with config fake_agent) and returns
   * the port it listens on. Without it the agent port is a placeholder number.
   */
  sidecar?: (spec: VmSpec) => Promise<Sidecar>;
  /** Images that start not built: the first ensureImage builds them, taking `buildDelayMs`. */
  unbuilt?: string[];
  /** Images built by an older svc (`outdated`), until rebuildImage. */
  outdated?: string[];
  buildDelayMs?: number;
  /** The most vCPUs one VM may have (Hypervisor.maxCpus); unset: no limit. */
  maxCpus?: number;
}

/** As with real VMs, an explicit host port must be free on loopback (the fake binds nothing itself). */
async function assertPortsFree(forwards: PortForward[]): Promise<void> {
  for (const f of forwards) {
    if (f.host_port && !(await portFree(f.host_port, f.proto)))
      throw new AlreadyExistsError(`host port ${f.host_port}/${f.proto} is busy`);
  }
}

function copyHandle(h: VmHandle): VmHandle {
  return { ...h, forwards: h.forwards.map((f) => ({ ...f })) };
}

/**
 * A hypervisor with no VMs behind it: a real state machine with boot delay and failure injection,
 * so the whole control plane runs without QEMU (config `hypervisor: fake`, and unit tests).
 */
export class InMemoryHypervisor extends FakeImages implements HypervisorAdapter, FakeGuests {
  readonly kind = 'fake';
  readonly maxCpus: number | undefined;
  private readonly vms = new Map<string, FakeVm>();
  /** Disks grown by growDisk, by VM name. */
  private readonly grownDisks = new Map<string, number>();
  private readonly listeners: ExitListener[] = [];
  private readonly failures = new Map<string, string>();
  private nextPort = 40000;
  private readonly bootDelayMs: number;

  constructor(private readonly options: InMemoryHypervisorOptions = {}) {
    super(options);
    this.bootDelayMs = options.bootDelayMs ?? 0;
    this.maxCpus = options.maxCpus;
  }

  /** True when each VM gets a stand-in guest (a local agent); else the in-memory agent answers. */
  get hasGuests(): boolean {
    return !!this.options.sidecar;
  }

  /** Without local agents, the in-memory agent and SSH probe answer for the fake guests. */
  guestStandIns(): GuestStandIns | undefined {
    return this.hasGuests
      ? undefined
      : { guestAgent: new InMemoryGuestAgent(this), sshProbe: new InMemorySshProbe(this) };
  }

  /** Makes the next call of `op` ('provision', 'launch', 'pause', ...) throw InternalError(message). */
  failNext(op: string, message = `injected ${op} failure`): void {
    this.failures.set(op, message);
  }

  /** Simulates the VM process dying on its own. */
  async crash(name: string, reason = 'killed by signal 9'): Promise<void> {
    const vm = this.vms.get(name);
    if (!vm || (vm.state !== 'running' && vm.state !== 'paused')) return;
    await this.halt(vm);
    for (const l of this.listeners) l(name, reason);
  }

  /** True when the VM's guest would answer now: running, booted, and not a never-ready image. */
  guestUp(name: string): boolean {
    const vm = this.vms.get(name);
    return (
      !!vm && vm.state === 'running' && Date.now() - vm.bootedAt >= this.bootDelayMs && vm.spec.image !== 'never-ready'
    );
  }

  /** Which VM a fake host port belongs to. */
  vmByPort(port: number): string | undefined {
    for (const [name, vm] of this.vms) {
      if (vm.handle && (vm.handle.ssh_port === port || vm.handle.agent_port === port)) return name;
    }
    return undefined;
  }

  /** The VMs that run (or are paused) now (tests). */
  running(): string[] {
    return [...this.vms].filter(([, vm]) => vm.state === 'running' || vm.state === 'paused').map(([name]) => name);
  }

  state(name: string): FakeState | undefined {
    return this.vms.get(name)?.state;
  }

  /** The spec the VM was last launched with (tests). */
  launchedWith(name: string): VmSpec | undefined {
    return this.vms.get(name)?.spec;
  }

  /** Whether the VM's last launch asked to run in the background (tests). */
  background(name: string): boolean | undefined {
    return this.vms.get(name)?.background;
  }

  /** Names of VMs with a live (running or paused) fake process. */
  live(): string[] {
    return [...this.vms].filter(([, v]) => v.state === 'running' || v.state === 'paused').map(([n]) => n);
  }

  private maybeFail(op: string): void {
    const msg = this.failures.get(op);
    if (msg !== undefined) {
      this.failures.delete(op);
      throw new InternalError(msg);
    }
  }

  /** A fake saved state loads into any fake (snapshot creates). */
  async savedStateKey(): Promise<string> {
    return 'fake';
  }

  protected builtOn(name: string): number | undefined {
    return this.vms.get(name)?.build;
  }

  protected runs(name: string): boolean {
    const state = this.vms.get(name)?.state;
    return state === 'running' || state === 'paused';
  }

  /** Host paths are checked as for real VMs; the fake has no driver to miss. */
  checkMounts(mounts: Mount[], rule: MountRule): Promise<Mount[]> {
    return checkHostDirs(mounts, rule);
  }

  /**
   * Shares reach a restored fake as they reach a real QEMU's (9p): the launch adds them, the guest
   * mounts them when told. The fake's guest is this host (local agents): its script mounts
   * nothing, it names the shares.
   */
  mountsAfterRestore(mounts: Mount[]): string {
    return `: svc fake guest: shares ${mounts.map(mountTag).join(' ')}`;
  }

  /** The same for letting go of them before a save: a script that names them and does nothing. */
  releaseMounts(mounts: Mount[]): string {
    return `: svc fake guest: release ${mounts.map(mountTag).join(' ')}`;
  }

  /** The VMs whose shares were plugged in again (giveSharesBack), in order. */
  readonly sharesGivenBack: string[] = [];

  async giveSharesBack(ref: VmRef, _mounts: Mount[]): Promise<void> {
    const vm = this.vms.get(ref.name);
    if (vm?.state !== 'running') throw new InvalidStateError(`vm ${ref.name} is not running`);
    this.sharesGivenBack.push(ref.name);
  }

  async provision(spec: VmSpec): Promise<void> {
    this.maybeFail('provision');
    if (spec.image === 'fail-provision') throw new InternalError('injected disk failure (image fail-provision)');
    if (this.vms.has(spec.name)) throw new InternalError(`vm ${spec.name} is already provisioned`);
    this.vms.set(spec.name, {
      spec,
      state: 'provisioned',
      snapshot: false,
      bootedAt: 0,
      build: this.buildOf(spec.image),
    });
  }

  async clone(template: VmRef, spec: VmSpec, capture?: string): Promise<{ snapshot: boolean }> {
    this.maybeFail('clone');
    if (this.vms.has(spec.name)) throw new InternalError(`vm ${spec.name} is already provisioned`);
    const named = snapshotOfSource(capture);
    if (named !== undefined) {
      const snapshot = (await this.keptSnapshot(template, named)).memory;
      this.vms.set(spec.name, {
        spec,
        state: 'provisioned',
        snapshot,
        bootedAt: 0,
        build: this.builtOn(template.name),
      });
      return { snapshot };
    }
    if (capture !== undefined && !this.captures.get(template.name)?.has(capture))
      throw new InternalError(`vm ${template.name} has no capture ${capture}`);
    const snapshot = capture !== undefined || (this.vms.get(template.name)?.snapshot ?? false);
    this.vms.set(spec.name, { spec, state: 'provisioned', snapshot, bootedAt: 0, build: this.builtOn(template.name) });
    return { snapshot };
  }

  /** Captures held per VM (forks): the fake keeps only their ids. */
  private readonly captures = new Map<string, Set<string>>();
  private captureCount = 0;

  async capture(ref: VmRef): Promise<{ id: string; paused_ms: number }> {
    this.maybeFail('capture');
    const vm = this.vms.get(ref.name);
    if (vm?.state !== 'running' && vm?.state !== 'paused')
      throw new InvalidStateError(`vm ${ref.name} has no running process`);
    const id = `base-${(++this.captureCount).toString(16).padStart(16, '0')}`;
    this.captures.set(ref.name, (this.captures.get(ref.name) ?? new Set()).add(id));
    return { id, paused_ms: 0 };
  }

  async dropCapture(ref: VmRef, id: string): Promise<void> {
    this.captures.get(ref.name)?.delete(id);
  }

  /** Captures a VM still holds (tests: a fork must not leave one behind). */
  heldCaptures(name: string): string[] {
    return [...(this.captures.get(name) ?? [])];
  }

  async launch(spec: VmSpec, options: LaunchOptions = {}): Promise<VmHandle> {
    this.maybeFail('launch');
    // The fake keeps no disks across daemon restarts: a VM it does not know has a disk "on disk".
    let vm = this.vms.get(spec.name);
    if (!vm) {
      vm = { spec, state: 'provisioned', snapshot: false, bootedAt: 0 };
      this.vms.set(spec.name, vm);
    }
    if (vm.state === 'running' || vm.state === 'paused')
      throw new InvalidStateError(`vm ${spec.name} is already running`);
    if (spec.image === 'fail-boot') throw new InternalError('injected boot failure (image fail-boot)');
    await assertPortsFree(spec.forwards);
    vm.spec = spec;
    vm.background = !!options.background;
    // `failNext('restore')`: the saved state does not load and the VM cold-boots, as QEMU's may.
    const unloadable = options.restore && vm.snapshot && this.failures.delete('restore');
    const fromSnapshot = !!options.restore && vm.snapshot && !unloadable;
    vm.snapshot = false;
    const sidecar = this.options.sidecar ? await this.options.sidecar(spec) : undefined;
    vm.sidecar = sidecar;
    vm.state = fromSnapshot && options.paused ? 'paused' : 'running';
    // A console log, as a real guest leaves one (read by GET /vms/{name}/logs).
    await appendFile(
      join(spec.dir, 'serial.log'),
      `[fake] ${spec.name} ${fromSnapshot ? 'restored from snapshot' : 'booted'}\n`,
    ).catch(() => undefined);
    vm.bootedAt = fromSnapshot ? Date.now() - this.bootDelayMs : Date.now();
    vm.handle = {
      ip: spec.overlay_ip ? spec.overlay_ip.split('/')[0] : '10.0.2.15',
      ssh_port: sidecar?.sshPort ?? this.nextPort++,
      agent_port: sidecar?.port ?? this.nextPort++,
      agent_cid: 0,
      pid: sidecar?.pid,
      forwards: spec.forwards.map((f) => ({
        ...f,
        host_port: f.host_port || this.nextPort++,
        kind: 'boot' as const,
        pid: sidecar?.pid,
      })),
      restored_from_snapshot: fromSnapshot,
      ...(unloadable ? { cold_boot_reason: 'the saved state did not load (failNext)' } : {}),
      state: toState({ fake: true }),
    };
    return copyHandle(vm.handle);
  }

  async stop(ref: VmRef): Promise<void> {
    this.maybeFail('stop');
    const vm = this.vms.get(ref.name);
    if (!vm) return;
    vm.snapshot = false;
    if (vm.state === 'running' || vm.state === 'paused') await this.halt(vm);
  }

  async kill(ref: VmRef): Promise<void> {
    const vm = this.vms.get(ref.name);
    if (vm && (vm.state === 'running' || vm.state === 'paused')) await this.halt(vm);
  }

  async pause(ref: VmRef): Promise<void> {
    this.maybeFail('pause');
    const vm = this.mustRun(ref.name, 'running');
    vm.state = 'paused';
  }

  async resume(ref: VmRef): Promise<void> {
    this.maybeFail('resume');
    const vm = this.mustRun(ref.name, 'paused');
    vm.state = 'running';
  }

  async suspend(ref: VmRef, options: SaveOptions = {}): Promise<{ snapshot: boolean }> {
    this.maybeFail('suspend');
    const vm = this.vms.get(ref.name);
    if (!vm || (vm.state !== 'running' && vm.state !== 'paused'))
      throw new InvalidStateError(`vm ${ref.name} is not running`);
    await this.halt(vm);
    this.suspends.set(ref.name, options);
    // As QEMU's: a guest sharing host folders is saved only once it let go of them.
    vm.snapshot = !vm.spec.mounts.length || !!options.sharesReleased;
    return { snapshot: vm.snapshot };
  }

  /**
   * Kept apart from the VMs' entries: a daemon started again hands this fake VMs it no longer
   * knows (they are known again at their next launch), whose disks still grow.
   */
  async growDisk(ref: VmRef, gb: number): Promise<void> {
    this.maybeFail('growDisk');
    const vm = this.vms.get(ref.name);
    if (vm?.state === 'running' || vm?.state === 'paused')
      throw new InvalidStateError(`vm ${ref.name} is running: its disk grows while it is stopped`);
    if (gb < (this.diskGb(ref.name) ?? 0))
      throw new InvalidArgumentError(`disk_gb ${gb} is smaller than the disk of vm ${ref.name}: a disk only grows`);
    this.grownDisks.set(ref.name, gb);
  }

  /** What each VM's last suspend was told (tests). */
  readonly suspends = new Map<string, SaveOptions>();

  /** The snapshot each VM was last reverted to (tests). */
  readonly reverted = new Map<string, string>();

  /**
   * Named snapshots are files in the VM's directory (whether each holds memory, the disk's size
   * then), so they outlive this fake as a real driver's do: a daemon started again reverts to them.
   */
  async snapshot(ref: VmRef, name: string, capture?: string): Promise<{ memory: boolean }> {
    this.maybeFail('snapshot');
    const vm = this.vms.get(ref.name);
    const live = vm?.state === 'running' || vm?.state === 'paused';
    if (capture !== undefined && !this.captures.get(ref.name)?.has(capture))
      throw new InternalError(`vm ${ref.name} has no capture ${capture}`);
    if (capture === undefined && live)
      throw new InvalidStateError(`vm ${ref.name} is running: its snapshot is taken from a capture`);
    const memory = capture !== undefined || (!!vm?.snapshot && !live);
    await mkdir(join(ref.dir, FAKE_SNAPSHOTS), { recursive: true });
    await writeFile(
      join(ref.dir, FAKE_SNAPSHOTS, `${name}.json`),
      JSON.stringify({ memory, diskGb: this.diskGb(ref.name) }),
    );
    return { memory };
  }

  async revert(ref: VmRef, name: string): Promise<{ memory: boolean }> {
    this.maybeFail('revert');
    const snap = await this.keptSnapshot(ref, name);
    let vm = this.vms.get(ref.name);
    if (vm?.state === 'running' || vm?.state === 'paused')
      throw new InvalidStateError(`vm ${ref.name} is running: it is stopped before a revert`);
    if (!vm) {
      vm = { spec: { name: ref.name, dir: ref.dir } as VmSpec, state: 'stopped', snapshot: false, bootedAt: 0 };
      this.vms.set(ref.name, vm);
    }
    vm.snapshot = snap.memory;
    if (snap.diskGb !== undefined) this.grownDisks.set(ref.name, snap.diskGb);
    this.reverted.set(ref.name, name);
    return { memory: snap.memory };
  }

  private async keptSnapshot(ref: VmRef, name: string): Promise<{ memory: boolean; diskGb?: number }> {
    const text = await readFile(join(ref.dir, FAKE_SNAPSHOTS, `${name}.json`), 'utf8').catch(() => undefined);
    if (!text) throw new InternalError(`vm ${ref.name} has no snapshot ${name}`);
    return JSON.parse(text) as { memory: boolean; diskGb?: number };
  }

  async dropSnapshot(ref: VmRef, name: string): Promise<void> {
    await rm(join(ref.dir, FAKE_SNAPSHOTS, `${name}.json`), { force: true });
  }

  /** The snapshots the fake keeps in a VM directory (tests: a delete must leave none). */
  keptSnapshots(dir: string): string[] {
    return existsSync(join(dir, FAKE_SNAPSHOTS))
      ? readdirSync(join(dir, FAKE_SNAPSHOTS))
          .map((f) => f.replace(/\.json$/, ''))
          .sort()
      : [];
  }

  /** The size of a VM's disk as the fake keeps it (made with its spec's, grown by growDisk). */
  diskGb(name: string): number | undefined {
    return this.grownDisks.get(name) ?? this.vms.get(name)?.spec.disk_gb;
  }

  async hasSavedState(ref: VmRef): Promise<boolean> {
    const vm = this.vms.get(ref.name);
    return !!vm?.snapshot && vm.state !== 'running' && vm.state !== 'paused';
  }

  /**
   * A fresh instance knows no VMs (in-memory processes die with the daemon). An instance handed
   * to a restarted daemon (embedders, tests) re-attaches to the VMs it still runs.
   */
  async reattach(ref: VmRef, _handle: VmHandle): Promise<VmHandle | null> {
    const vm = this.vms.get(ref.name);
    if (!vm?.handle || (vm.state !== 'running' && vm.state !== 'paused')) return null;
    return copyHandle(vm.handle);
  }

  async rename(from: VmRef, to: VmRef): Promise<void> {
    const grown = this.grownDisks.get(from.name);
    this.grownDisks.delete(from.name);
    if (grown !== undefined) this.grownDisks.set(to.name, grown);
    const vm = this.vms.get(from.name);
    if (!vm) return;
    this.vms.delete(from.name);
    vm.spec = { ...vm.spec, name: to.name, dir: to.dir };
    this.vms.set(to.name, vm);
    await vm.sidecar?.relocate?.(to.dir);
  }

  /**
   * A fake disk does not open when its VM directory holds `disk-fault` (a test writes it, as a QEMU
   * disk's image might go): the file's text is the fault. It outlives a restart of the daemon.
   */
  async diskFault(vm: VmRef): Promise<string | undefined> {
    return readFile(join(vm.dir, FAKE_DISK_FAULT), 'utf8').catch(() => undefined);
  }

  /** A VM from another node: known as stopped, with its saved state when it was suspended. */
  async takeIn(spec: VmSpec, suspended: boolean): Promise<void> {
    if (this.vms.has(spec.name)) throw new InternalError(`vm ${spec.name} is already provisioned`);
    this.vms.set(spec.name, { spec, state: 'stopped', snapshot: suspended, bootedAt: 0 });
  }

  async addForwards(ref: VmRef, forwards: PortForward[]): Promise<VmHandle> {
    const vm = this.mustRun(ref.name, 'running');
    await assertPortsFree(forwards);
    vm.handle!.forwards.push(
      ...forwards.map((f) => ({
        ...f,
        host_port: f.host_port || this.nextPort++,
        kind: 'boot' as const,
        pid: vm.handle!.pid,
      })),
    );
    return copyHandle(vm.handle!);
  }

  async destroy(ref: VmRef): Promise<void> {
    this.grownDisks.delete(ref.name);
    await rm(join(ref.dir, FAKE_SNAPSHOTS), { recursive: true, force: true });
    const vm = this.vms.get(ref.name);
    if (!vm) return;
    await this.halt(vm);
    this.vms.delete(ref.name);
  }

  onExit(listener: ExitListener): void {
    this.listeners.push(listener);
  }

  /** In-memory VMs cannot outlive the daemon: stops every one (and its sidecar). */
  async release(): Promise<void> {
    await Promise.all([...this.vms.values()].map((vm) => this.halt(vm)));
    await this.dropBundles();
  }

  private async halt(vm: FakeVm): Promise<void> {
    if (vm.state === 'running' || vm.state === 'paused') vm.state = 'stopped';
    vm.handle = undefined;
    const s = vm.sidecar;
    vm.sidecar = undefined;
    await s?.stop();
  }

  private mustRun(name: string, want: FakeState): FakeVm {
    const vm = this.vms.get(name);
    if (!vm || vm.state !== want) throw new InvalidStateError(`vm ${name} is not ${want}`);
    return vm;
  }
}
