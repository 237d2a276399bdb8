import { createHash } from 'node:crypto';
import { appendFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
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
import type { Mount, PortForward } from '../../../domain/vm.js';
import { checkHostDirs } from '../host-dirs.js';
import { checkImportFile, sniffImportFile } from '../../images/import-files.js';
import type { ImageSource } from '../../../domain/image-request.js';
import { portFree } from '../free-port.js';
import type {
  ExitListener,
  HypervisorAdapter,
  ImageDetails,
  ImageInfo,
  ImageProgress,
  LaunchOptions,
  MountRule,
  VmHandle,
  VmRef,
  VmSpec,
} from '../../../ports/hypervisor.js';
import { toState } from '../adapter-state.js';
import type { GuestStandIns } from '../driver.js';
import type { FakeGuests } from './fake-guests.js';
import { InMemoryGuestAgent } from './in-memory-guest-agent.js';
import { InMemorySshProbe } from './in-memory-ssh-probe.js';

type FakeState = 'provisioned' | 'running' | 'paused' | 'stopped';

interface FakeVm {
  spec: VmSpec;
  state: FakeState;
  snapshot: boolean;
  bootedAt: number;
  /** The last launch asked for a lower CPU priority. */
  background?: boolean;
  handle?: VmHandle;
  /** Extra process the fake runs for the VM (a local svc-agent), stopped with it. */
  sidecar?: Sidecar;
}

/**
 * Images the fake knows. `never-ready` boots but its guest never answers (for deadline tests);
 * `fail-provision` and `fail-boot` fail at those steps.
 */
export const FAKE_IMAGES: Record<string, ImageInfo> = {
  debian: { id: 'debian', agent_ready: true, ssh_user: 'svc', min_disk_gb: 2, min_memory_mb: 256, built: true },
  minimal: { id: 'minimal', agent_ready: true, ssh_user: 'svc', min_disk_gb: 1, min_memory_mb: 128, built: true },
  'ssh-only': { id: 'ssh-only', agent_ready: false, ssh_user: 'svc', min_disk_gb: 1, built: true },
  'never-ready': { id: 'never-ready', agent_ready: true, ssh_user: 'svc', min_disk_gb: 1, built: true },
  'fail-provision': { id: 'fail-provision', agent_ready: true, ssh_user: 'svc', min_disk_gb: 1, built: true },
  'fail-boot': { id: 'fail-boot', agent_ready: true, ssh_user: 'svc', min_disk_gb: 1, built: true },
};
/** As on QEMU, `default` names the debian image. */
const FAKE_ALIASES: Record<string, string> = { default: 'debian' };

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
  buildDelayMs?: number;
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
export class InMemoryHypervisor implements HypervisorAdapter, FakeGuests {
  readonly kind = 'fake';
  private readonly vms = new Map<string, FakeVm>();
  private readonly listeners: ExitListener[] = [];
  private readonly failures = new Map<string, string>();
  private readonly removed = new Set<string>();
  /** This instance's images: the fixed ones plus those baked. */
  private readonly images: Record<string, ImageInfo> = { ...FAKE_IMAGES };
  private nextPort = 40000;
  private readonly bootDelayMs: number;

  /** Builds of unbuilt images started (one per image, shared by whoever waits for it). */
  readonly builds: string[] = [];
  private readonly building = new Map<string, Promise<void>>();

  constructor(private readonly options: InMemoryHypervisorOptions = {}) {
    this.bootDelayMs = options.bootDelayMs ?? 0;
    for (const id of options.unbuilt ?? []) if (this.images[id]) this.images[id] = { ...this.images[id], built: false };
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

  /** A fake saved state loads into any fake (snapshot creates). */
  async savedStateKey(): Promise<string> {
    return 'fake';
  }

  /** An unbuilt image (options.unbuilt) is built once, however many wait for it. */
  async ensureImage(image: string): Promise<void> {
    const info = await this.resolveImage(image);
    if (info.built) return;
    let b = this.building.get(info.id);
    if (!b) {
      this.builds.push(info.id);
      b = new Promise<void>((r) => setTimeout(r, this.options.buildDelayMs ?? 0)).then(() => {
        this.images[info.id] = { ...this.images[info.id], built: true };
      });
      this.building.set(info.id, b);
    }
    await b;
  }

  async listImages(inUse: (id: string) => string[]): Promise<ImageDetails[]> {
    return Promise.all(Object.keys(this.images).map((id) => this.getImage(id, inUse)));
  }

  async getImage(image: string, inUse: (id: string) => string[]): Promise<ImageDetails> {
    const info = this.images[FAKE_ALIASES[image] ?? image];
    if (!info || this.removed.has(info.id)) throw new NotFoundError(`image ${image} is not built`);
    return {
      ...info,
      os: 'fake',
      description: `the fake hypervisor's ${info.id} image`,
      size_bytes: 0,
      created_at: new Date(0).toISOString(),
      boot: 'kernel',
      source: info.id,
      in_use_by: inUse(info.id),
    };
  }

  /** A baked image is the base image's info under a new id. */
  async bakeImage(id: string, vm: VmRef, meta: { from_image: string }): Promise<void> {
    if (this.images[id] && !this.removed.has(id)) throw new AlreadyExistsError(`image ${id} already exists`);
    const state = this.vms.get(vm.name)?.state;
    if (state === 'running' || state === 'paused')
      throw new InvalidStateError(`vm ${vm.name} is running; bake a stopped vm`);
    const base = await this.resolveImage(meta.from_image);
    this.images[id] = { ...base, id };
    this.removed.delete(id);
  }

  /** Checks the host file as the QEMU adapter does first; a disk is an SSH image, an archive an agent one. */
  async importImage(
    id: string,
    source: ImageSource,
    allowed: readonly string[],
    meta: { ssh_user?: string },
    progress: (p: ImageProgress) => void,
  ): Promise<void> {
    if (this.images[id] && !this.removed.has(id)) throw new AlreadyExistsError(`image ${id} already exists`);
    const file = await checkImportFile(source.path, allowed);
    await sniffImportFile(file, source.type);
    progress({ percent: 50, message: `importing ${source.type}:${file}` });
    const disk = source.type === 'disk';
    this.images[id] = {
      id,
      agent_ready: !disk,
      ssh_user: disk ? (meta.ssh_user ?? 'root') : 'root',
      min_disk_gb: 1,
      built: true,
    };
    this.removed.delete(id);
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
      this.images[bundle.id] = { ...(JSON.parse(body.toString()) as ImageInfo), id: bundle.id, built: true };
      this.removed.delete(bundle.id);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  async removeImage(image: string): Promise<void> {
    await this.getImage(image, () => []);
    this.removed.add(FAKE_ALIASES[image] ?? image);
  }

  /** Host paths are checked as for real VMs; the fake has no driver to miss. */
  checkMounts(mounts: Mount[], rule: MountRule): Promise<Mount[]> {
    return checkHostDirs(mounts, rule);
  }

  async provision(spec: VmSpec): Promise<void> {
    this.maybeFail('provision');
    if (spec.image === 'fail-provision') throw new InternalError('injected disk failure (image fail-provision)');
    if (this.vms.has(spec.name)) throw new InternalError(`vm ${spec.name} is already provisioned`);
    this.vms.set(spec.name, { spec, state: 'provisioned', snapshot: false, bootedAt: 0 });
  }

  async clone(template: VmRef, spec: VmSpec, capture?: string): Promise<{ snapshot: boolean }> {
    this.maybeFail('clone');
    if (this.vms.has(spec.name)) throw new InternalError(`vm ${spec.name} is already provisioned`);
    if (capture !== undefined && !this.captures.get(template.name)?.has(capture))
      throw new InternalError(`vm ${template.name} has no capture ${capture}`);
    const snapshot = capture !== undefined || (this.vms.get(template.name)?.snapshot ?? false);
    this.vms.set(spec.name, { spec, state: 'provisioned', snapshot, bootedAt: 0 });
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
    vm.state = 'running';
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

  async suspend(ref: VmRef): Promise<{ snapshot: boolean }> {
    this.maybeFail('suspend');
    const vm = this.vms.get(ref.name);
    if (!vm || (vm.state !== 'running' && vm.state !== 'paused'))
      throw new InvalidStateError(`vm ${ref.name} is not running`);
    await this.halt(vm);
    vm.snapshot = true;
    return { snapshot: true };
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
    const vm = this.vms.get(from.name);
    if (!vm) return;
    this.vms.delete(from.name);
    vm.spec = { ...vm.spec, name: to.name, dir: to.dir };
    this.vms.set(to.name, vm);
    await vm.sidecar?.relocate?.(to.dir);
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
    if (this.bundleRoot) await rm(await this.bundleRoot, { recursive: true, force: true });
    this.bundleRoot = undefined;
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
