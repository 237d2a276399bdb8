import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { childEnv } from '../../process-kit/child-env.js';
import { AlreadyExistsError, InternalError, InvalidStateError } from '../../../domain/errors.js';
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
import { chooseAccel, probeKernels, type Accel } from './accel-probe.js';
import { portFree } from '../free-port.js';
import { CatalogImages } from '../catalog-images.js';
import { seedFor, writeSeed } from '../guest-seed.js';
import type { Mount, PortForward } from '../../../domain/vm.js';
import { killStray, layout } from './qemu-files.js';
import { growOverlay } from '../../images/overlay.js';
import { capLog } from '../../fs-kit/log-cap.js';
import {
  callOffSave,
  clearSaved,
  OWN_IMAGE,
  OWN_STATE,
  processOwner,
  readSaved,
  saveStream,
  sweepMigrationSockets,
  writeSaved,
} from './saved-state.js';
import { LAYER } from './disk-layers.js';
import { MAKER_PIDFILE, RamImages } from './ram-image.js';
import { RamStaging } from './ram-staging.js';
import { VmCommand } from './vm-command.js';
import { SpareQemus, spareDisk } from './spare-qemus.js';
import { LiveVms } from './live-vms.js';
import { QemuVmDisks } from './vm-disks.js';
import { QemuCaptures } from './qemu-captures.js';
import { QemuSnapshots } from './qemu-snapshots.js';
import { findQemu, savedNic } from './qemu-state.js';
import { NicLinks } from './nic-links.js';
import { QemuLauncher } from './qemu-launcher.js';
import { QemuShares } from './qemu-shares.js';
import type { NetdGuestNetwork } from '../../guest-net/netd-guest-network.js';
import type { CloneSpeedUps, GuestWarmUpCalls } from '../../../ports/clone-speed-ups.js';

import type { QemuOptions } from './qemu-options.js';

export type { QemuOptions };

const run = promisify(execFile);
const LOGS = ['serial.log', 'qemu.log', 'virtiofsd.log'];
const LOG_CHECK_MS = 10_000;
/**
 * The Hypervisor port with QEMU: one detached process per VM (it outlives the daemon), driven
 * over QMP (its command line: vm-command.ts); its NIC's other end in svc-netd (nic-links.ts); a
 * qcow2 overlay per VM on the image's golden disk; suspend as a migration stream made a RAM image
 * (saved-state.ts, ram-image.ts), host folders let go of first (qemu-shares.ts); forks from captures
 * of running VMs (qemu-captures.ts); clones on frozen layers of their template (disk-layers.ts,
 * vm-disks.ts), started in a QEMU their template's last clone had started ahead when there is one
 * (spare-qemus.ts). A launch (qemu-launcher.ts) restores what was saved and tries a failed start
 * again as launch-plan.ts says; the processes it starts or re-attaches are watched by live-vms.ts and found
 * again after a restart by qemu-state.ts.
 */
export class QemuHypervisor extends CatalogImages implements HypervisorAdapter, CloneSpeedUps {
  readonly kind = 'qemu';
  readonly maxCpus: number;
  private readonly live = new LiveVms();
  private accel: Promise<Accel> | undefined;
  private version: Promise<string> | undefined;
  private readonly logTimer: NodeJS.Timeout;

  private readonly command: VmCommand;
  private readonly ramImages: RamImages;
  private readonly staging: RamStaging | undefined;
  private readonly spares: SpareQemus;
  private readonly disks: QemuVmDisks;
  private readonly links: NicLinks;
  private readonly launcher: QemuLauncher;
  private readonly shares: QemuShares;
  private readonly captures: QemuCaptures;
  private readonly snapshots: QemuSnapshots;

  constructor(private readonly o: QemuOptions) {
    super(o.images);
    this.maxCpus = o.maxVmCpus || availableParallelism();
    this.logTimer = setInterval(() => void this.capLogs(), LOG_CHECK_MS).unref();
    this.staging = o.ramStaging && new RamStaging({ ...o.ramStaging, log: o.log });
    sweepMigrationSockets().then(
      (n) => n && o.log.info({ folders: n }, 'removed the save sockets of daemons that died in a save'),
      (err: Error) => o.log.warn({ err: err.message }, 'cannot sweep the save sockets'),
    );
    this.command = new VmCommand({
      ...o,
      accelerator: () => this.accelerator(),
      guestNet: o.network ? 'netd' : 'qemu-user',
    });
    this.ramImages = new RamImages({
      binary: o.qemuBinary,
      command: this.command,
      log: o.log,
      failpoints: o.failpoints,
      enabled: o.ramImages ?? true,
      staging: this.staging,
    });
    const seed = (spec: VmSpec) => writeSeed(layout(spec.dir).seed, seedFor(spec, o.mountDriver));
    this.shares = new QemuShares({ command: this.command, live: this.live, mountDriver: o.mountDriver });
    this.links = new NicLinks({ net: o.network, log: o.log });
    this.live.onGone((name) => void this.links.down(name));
    this.spares = new SpareQemus({ binary: o.qemuBinary, command: this.command, log: o.log, seed, links: this.links });
    this.launcher = new QemuLauncher({
      o,
      live: this.live,
      command: this.command,
      links: this.links,
      ramImages: this.ramImages,
      cid: () => this.vsockCid(),
      kill: (vm) => this.kill(vm),
      addForwards: (vm, forwards) => this.addForwards(vm, forwards),
    });
    this.disks = new QemuVmDisks({
      images: o.images,
      ramImages: this.ramImages,
      spares: this.spares,
      mountDriver: o.mountDriver,
      vsock: () => this.vsockCid() > 0,
      useSpares: o.spares ?? true,
      maxLayers: o.maxDiskLayers,
      bases: o.imageBases,
      log: o.log,
    });
    this.captures = new QemuCaptures({
      live: this.live,
      disks: this.disks,
      shares: this.shares,
      log: o.log,
      failpoints: o.failpoints,
      maxLayers: o.maxDiskLayers,
    });
    this.snapshots = new QemuSnapshots({
      live: this.live,
      captures: this.captures,
      spares: this.spares,
      maxLayers: o.maxDiskLayers,
    });
  }

  /** Caps the logs of running VMs (a guest can print without end). */
  async capLogs(): Promise<void> {
    const max = this.o.logMaxBytes ?? 16 << 20;
    for (const v of this.live.all()) {
      for (const f of LOGS) await capLog(join(v.dir, f), max).catch(() => undefined);
    }
  }

  /** The accelerator in use, probed once. */
  accelerator(): Promise<Accel> {
    const root = this.o.images.root;
    this.accel ??= chooseAccel(this.o.accel, {
      qemu: this.o.qemuBinary,
      kernels: probeKernels(root),
      cacheFile: join(root, '.accel-probe.json'),
    }).then((a) => {
      this.o.log.info({ accel: a }, 'qemu accelerator chosen');
      return a;
    });
    return this.accel;
  }

  protected diskOf(vm: VmRef): string {
    return layout(vm.dir).disk;
  }

  protected runs(name: string): boolean {
    return this.live.has(name);
  }

  /** 9p shares can be added to a restored guest (qemu-args.ts `sharesToAdd`); virtio-fs ones only at boot. */
  mountsAfterRestore(mounts: Mount[]): string | undefined {
    return this.shares.afterRestore(mounts);
  }

  releaseMounts(mounts: Mount[]): string | undefined {
    return this.shares.release(mounts);
  }

  giveSharesBack(vm: VmRef, mounts: Mount[]): Promise<void> {
    return this.shares.giveBack(vm, mounts);
  }

  checkMounts(mounts: Mount[], rule: MountRule): Promise<Mount[]> {
    return this.shares.check(mounts, rule);
  }

  provision(spec: VmSpec): Promise<void> {
    return this.disks.provision(spec);
  }

  clone(template: VmRef, spec: VmSpec, capture?: string): Promise<{ snapshot: boolean }> {
    return this.disks.clone(template, spec, capture);
  }

  capture(vm: VmRef, forks = 1, options: SaveOptions = {}): Promise<{ id: string; paused_ms: number }> {
    return this.captures.take(vm, forks, options);
  }

  dropCapture(vm: VmRef, id: string): Promise<void> {
    return this.captures.drop(vm, id);
  }

  /** Its template's next spare starts now, not beside the clone's first answer (2 cores: 0.1-0.3 s slower). */
  cloneReady(clone: VmRef): void {
    this.spares.ready(clone.name);
  }

  warmWith(calls: GuestWarmUpCalls | undefined): void {
    this.spares.warmWith(this.o.sparesWarm === false ? undefined : calls);
  }

  /** A vsock context id for a VM starting now, or 0 when the host has no vhost-vsock. */
  private vsockCid(): number {
    return this.o.vsock && existsSync('/dev/vhost-vsock') ? this.live.freeCid() : 0;
  }

  async launch(spec: VmSpec, options: LaunchOptions = {}): Promise<VmHandle> {
    if (this.live.has(spec.name)) throw new InvalidStateError(`vm ${spec.name} is already running`);
    // An unknown image fails here, before any port is held; a disk on a build of it is not kept
    // waiting for a newer build under way; one whose image folder moved stands on it again.
    await this.disks.standing(spec);
    // A template that runs again changes: the QEMU started for its next clone would restore the old
    // one. (One a crashed daemon left was swept when this daemon started: the template was stopped.)
    await this.spares.drop(spec.name);
    const accel = await this.accelerator();
    for (const f of spec.forwards) {
      if (f.host_port && !(await portFree(f.host_port, f.proto)))
        throw new AlreadyExistsError(`host port ${f.host_port}/${f.proto} is busy`);
    }
    const held = await this.spares.start(spec.name, !!options.restore, !options.paused);
    const handle = held
      ? await this.launcher.adopt(spec, held, accel, options)
      : await this.launcher.spawn(spec, options, accel);
    // Also a copy that cold-booted after all: it grows before its kernel looks for its disk.
    await this.launcher.growDisk(spec);
    return handle;
  }

  /**
   * What a saved state of this QEMU depends on beyond its image and shape: QEMU's version, the
   * machine, the accelerator and every device the daemon's config puts in (snapshot creates).
   */
  async savedStateKey(): Promise<string> {
    this.version ??= run(this.o.qemuBinary, ['--version'], { env: childEnv() }).then((r) => r.stdout.split('\n')[0]);
    return [
      await this.version,
      'pc',
      await this.accelerator(),
      this.command.guestNet,
      this.o.mountDriver,
      `vsock=${this.vsockCid() > 0}`,
      `runas=${this.o.qemuUser ?? ''}`,
      `ram-images=${this.o.ramImages ?? true}`,
    ].join('|');
  }

  async stop(vm: VmRef, timeoutMs: number): Promise<void> {
    await clearSaved(vm.dir);
    const v = this.live.get(vm.name);
    if (!v) return;
    await this.captures.settle(vm.name);
    v.expected = true;
    try {
      const st = await v.qmp.execute<{ status: string }>('query-status');
      if (st.status === 'paused') await v.qmp.execute('cont');
      await v.qmp.execute('system_powerdown');
    } catch {
      // the monitor is gone: fall through to the kill
    }
    if (await this.live.waitGone(v, timeoutMs)) return;
    this.o.log.warn({ vm: vm.name, timeout_ms: timeoutMs }, 'guest ignored the power-off; killing it');
    await this.kill(vm);
  }

  async kill(vm: VmRef): Promise<void> {
    const v = this.live.get(vm.name);
    if (!v) {
      await this.links.down(vm.name);
      await this.killLeftoverMaker(vm);
      await this.spares.sweep(vm.dir);
      this.spares.forget(vm.name);
      // Its QEMU may have been started as a spare, under the spare's disk path.
      const disks = [layout(vm.dir).disk, await spareDisk(vm.dir)].filter((d): d is string => !!d);
      return killStray(
        vm.dir,
        (pid) => this.o.log.warn({ vm: vm.name, pid }, 'killing a qemu process the daemon had no hold on'),
        undefined,
        disks,
      );
    }
    v.expected = true;
    try {
      process.kill(v.pid, 'SIGKILL');
    } catch {
      // already gone
    }
    if (!(await this.live.waitGone(v, 10_000)))
      throw new InternalError(`qemu pid ${v.pid} of vm ${vm.name} did not die`);
  }

  async pause(vm: VmRef): Promise<void> {
    await this.live.running(vm.name).qmp.execute('stop');
  }

  async resume(vm: VmRef): Promise<void> {
    await this.live.running(vm.name).qmp.execute('cont');
  }

  async suspend(vm: VmRef, options: SaveOptions = {}): Promise<{ snapshot: boolean }> {
    const v = this.live.running(vm.name);
    await this.captures.settle(vm.name);
    v.expected = true;
    let snapshot = false;
    const t0 = Date.now();
    try {
      const stream = async () =>
        saveStream(v.qmp, vm.dir, {
          owner: await processOwner(v.pid),
          stopFirst: true,
          migrating: () => this.o.failpoints?.hit('suspend.streaming'),
        });
      const refusal = (m: string) => new Error(`${m}; it is not saved`);
      // A guest with its shares in cannot be saved: they are unplugged first (qemu-shares.ts).
      await this.shares.saveWithout(v, vm, options, { back: false, refusal }, stream);
      await writeSaved(vm.dir, { kind: 'stream', file: OWN_STATE });
      snapshot = true;
    } catch (err) {
      this.o.log.warn({ vm: vm.name, err: (err as Error).message }, 'suspend snapshot failed; restore will cold-boot');
    }
    this.o.log.info({ vm: vm.name, snapshot, save_ms: Date.now() - t0 }, 'suspend timing');
    await v.qmp.execute('quit').catch(() => undefined);
    if (!(await this.live.waitGone(v, 10_000))) await this.kill(vm);
    // Restores (a pool's claims among them) map a RAM image instead of loading the stream; a VM
    // suspended for a move keeps the stream: the other node loads it once, and under TCG making the
    // image is a second or more of the guest's time away.
    const image =
      snapshot && v.spec && !options.forMove
        ? await this.ramImages.make({ ...v.spec, name: vm.name, dir: vm.dir }, OWN_STATE, OWN_IMAGE)
        : undefined;
    if (image) {
      await writeSaved(vm.dir, image);
      await rm(join(vm.dir, OWN_STATE), { force: true });
    }
    return { snapshot };
  }

  /**
   * A RAM image's maker (a second QEMU, ram-image.ts) lives only inside one call of this daemon; one
   * that is found after a restart was left by a crash: paused, holding the guest's memory and the
   * disk's lock, which would fail the VM's next start. Found by its own pidfile.
   */
  private killLeftoverMaker(vm: VmRef): Promise<void> {
    return killStray(
      vm.dir,
      (pid) => this.o.log.warn({ vm: vm.name, pid }, 'killing a ram image maker a crashed daemon left'),
      MAKER_PIDFILE,
    );
  }

  async reattach(vm: VmSpec, handle: VmHandle): Promise<VmHandle | null> {
    await this.killLeftoverMaker(vm);
    const found = await findQemu(vm, handle, this.o.log);
    if (!found) return null;
    // A save its dead daemon left under way would hold its guest stopped for good.
    await callOffSave(found.qmp).then(
      (was) => was && this.o.log.warn({ vm: vm.name }, 'called off a save its daemon left under way'),
      (err: Error) => this.o.log.warn({ vm: vm.name, err: err.message }, 'cannot call off a save left under way'),
    );
    const held = { ...handle, pid: found.pid };
    this.live.track(vm.name, { ...found, expected: false, cid: handle.agent_cid, handle: held, dir: vm.dir, spec: vm });
    await this.links
      .reattach(vm, savedNic(vm.dir, handle.state), handle)
      .catch((err: Error) => this.o.log.error({ vm: vm.name, err: err.message }, 'cannot attach the vm network again'));
    return held;
  }

  async hasSavedState(vm: VmRef): Promise<boolean> {
    return !this.live.has(vm.name) && (await readSaved(vm.dir)) !== undefined;
  }

  /**
   * Every file is in the VM directory the store moved. A running VM keeps its process (whose
   * command line still shows the old name and disk path: re-attach checks the tag and disk the
   * launch recorded) and is re-keyed here.
   */
  takeIn(spec: VmSpec, suspended: boolean): Promise<void> {
    return this.disks.takeIn(spec, suspended);
  }

  diskFault(vm: VmRef): Promise<string | undefined> {
    return this.disks.diskFault(vm);
  }

  restand(vm: VmRef, image: string): Promise<void> {
    return this.disks.restand(vm, image);
  }

  async rename(from: VmRef, to: VmRef): Promise<void> {
    await this.spares.drop(from.name, to.dir);
    const v = this.live.get(from.name);
    this.live.rename(from.name, to.name, to.dir);
    if (v?.handle) await this.links.moved(from.name, to, savedNic(to.dir, v.handle.state));
  }

  async addForwards(vm: VmRef, forwards: PortForward[]): Promise<VmHandle> {
    const v = this.live.running(vm.name);
    if (!v.handle) throw new InvalidStateError(`vm ${vm.name} has no handle to add forwards to`);
    v.handle.forwards.push(...(await this.links.forward(vm, v.qmp, forwards, v.pid)));
    return { ...v.handle, forwards: [...v.handle.forwards] };
  }

  async growDisk(vm: VmRef, gb: number): Promise<void> {
    if (this.live.has(vm.name))
      throw new InvalidStateError(`vm ${vm.name} is running: its disk grows while it is stopped`);
    await growOverlay(layout(vm.dir).disk, gb, vm.name);
  }

  snapshot(vm: VmRef, name: string, capture?: string): Promise<{ memory: boolean }> {
    return this.snapshots.take(vm, name, capture);
  }

  revert(vm: VmRef, name: string): Promise<{ memory: boolean }> {
    return this.snapshots.revert(vm, name);
  }

  dropSnapshot(vm: VmRef, name: string): Promise<void> {
    return this.snapshots.drop(vm, name);
  }

  async destroy(vm: VmRef): Promise<void> {
    await this.spares.drop(vm.name, vm.dir);
    await this.kill(vm);
    await this.snapshots.dropAll(vm);
    const l = layout(vm.dir);
    await clearSaved(vm.dir);
    // Its links to shared layers: a layer's file goes with the last directory that links it.
    const layers = (await readdir(vm.dir).catch(() => [] as string[])).filter(
      (n) => LAYER.test(n) || n === 'layer.json',
    );
    for (const f of [l.disk, l.seed, l.qmp, l.pidfile, ...layers.map((n) => join(vm.dir, n))])
      await rm(f, { force: true });
  }

  onExit(listener: ExitListener): void {
    this.live.onExit(listener);
  }

  /** The guests' networks (the composition root binds them as the GuestNetwork port). */
  guestNetwork(): NetdGuestNetwork | undefined {
    return this.o.network;
  }

  /** Resolves once no spare QEMU is on its way (tests, benchmarks). */
  sparesSettled(): Promise<void> {
    return this.spares.settled();
  }

  /** Live QEMU pids by VM name (tests, benchmarks). */
  pids(): Record<string, number> {
    return Object.fromEntries(this.live.all().map((v) => [v.name, v.pid]));
  }

  /** Drops monitor connections without touching the VMs (daemon stop: they keep running). */
  async release(): Promise<void> {
    clearInterval(this.logTimer);
    this.live.release();
    await this.spares.stopAll();
    await this.staging?.close();
    this.o.network?.close();
  }
}
