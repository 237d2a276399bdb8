import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { copyFile, link, mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { InvalidStateError, NotSupportedError } from '../../../domain/errors.js';
import type { Mount, PortForward } from '../../../domain/vm.js';
import type { ExitListener, LaunchOptions, MountRule, VmHandle, VmRef, VmSpec } from '../../../ports/hypervisor.js';
import type { HypervisorAdapter } from '../../../ports/hypervisor-adapter.js';
import type { Logger } from '../../../ports/logger.js';
import { fromState, toState } from '../adapter-state.js';
import { seedFor, writeSeed } from '../guest-seed.js';
import { CatalogImages } from '../catalog-images.js';
import { checkHostDirs } from '../host-dirs.js';
import type { ImageCatalog } from '../../images/image-catalog.js';
import { growOverlay, makeOverlay } from '../../images/overlay.js';
import { childEnv } from '../../process-kit/child-env.js';
import { ChApi } from './ch-api.js';
import { AGENT_VSOCK_PORT, chLayout, GUEST_CID, rehome, vmConfig } from './ch-vm-config.js';
import { orAfter } from '../../process-kit/or-after.js';
import { alive } from '../../process-kit/pid-alive.js';

export interface ChOptions {
  binary: string;
  images: ImageCatalog;
  log: Logger;
}

interface ChState {
  pid: number;
  api: string;
}

interface LiveCh {
  pid: number;
  api: ChApi;
  dir: string;
  child?: ChildProcess;
  expected: boolean;
  gone: Promise<void>;
  poll?: NodeJS.Timeout;
}

const NO_NETWORK =
  'cloud-hypervisor: its guests have no network device, so no host forwards (docs/cloud-hypervisor.md)';

/**
 * The Hypervisor ports with Cloud Hypervisor: one detached `cloud-hypervisor` process per VM,
 * driven over its REST API socket; the project's images booted with their own kernel; the agent
 * reached over hybrid vsock (the VM's `vsock.sock`); suspend as the VMM's snapshot (its memory,
 * device state and config in a directory) that a restore starts from with `--restore`; a clone
 * copies the template's disk and snapshot with the paths moved to its own directory. Its guests
 * have no network device (so no forwards, no SSH) and no shares yet. docs/cloud-hypervisor.md
 * says what has run against the real binary: nothing here has (no KVM on the machines it was made
 * on); it is tested against a stand-in that speaks the same API.
 */
export class ChHypervisor extends CatalogImages implements HypervisorAdapter {
  readonly kind = 'cloud-hypervisor';
  private readonly live = new Map<string, LiveCh>();
  private readonly listeners: ExitListener[] = [];

  constructor(private readonly o: ChOptions) {
    super(o.images);
  }

  // ---- images: the shared catalog (CatalogImages) ----
  protected diskOf(vm: VmRef): string {
    return chLayout(vm.dir).disk;
  }

  protected runs(name: string): boolean {
    return this.live.has(name);
  }

  // ---- host links ----
  async checkMounts(mounts: Mount[], rule: MountRule): Promise<Mount[]> {
    const real = await checkHostDirs(mounts, rule);
    if (real.length)
      throw new NotSupportedError(
        'cloud-hypervisor: host folder shares are not supported yet (docs/cloud-hypervisor.md)',
      );
    return real;
  }

  async addForwards(vm: VmRef, forwards: PortForward[]): Promise<VmHandle> {
    if (!this.live.has(vm.name)) throw new InvalidStateError(`vm ${vm.name} is not running`);
    throw new NotSupportedError(`${NO_NETWORK}; asked for ${forwards.map((f) => f.guest_port).join(', ')}`);
  }

  // ---- disks ----
  async provision(spec: VmSpec): Promise<void> {
    const l = chLayout(spec.dir);
    await makeOverlay(await this.o.images.get(spec.image), l.disk, spec.disk_gb, spec.name);
    await writeSeed(l.seed, seedFor(spec, 'virtiofs'));
  }

  /**
   * The template's disk copied (reflinked where the filesystem can) and its snapshot too, with the
   * paths its config.json names moved to the clone's directory; the memory file is linked, not
   * copied (a restore only reads it).
   */
  async clone(template: VmRef, spec: VmSpec): Promise<{ snapshot: boolean }> {
    const from = chLayout(template.dir);
    const to = chLayout(spec.dir);
    await copyFile(from.disk, to.disk);
    await writeSeed(to.seed, seedFor(spec, 'virtiofs'));
    if (!existsSync(join(from.snapshot, 'config.json'))) return { snapshot: false };
    const tmp = `${to.snapshot}.tmp`;
    await rm(tmp, { recursive: true, force: true });
    await mkdir(tmp);
    for (const f of await readdir(from.snapshot)) {
      if (f === 'config.json')
        await writeFile(join(tmp, f), rehome(await readFile(join(from.snapshot, f), 'utf8'), template.dir, spec.dir));
      else await link(join(from.snapshot, f), join(tmp, f)).catch(() => copyFile(join(from.snapshot, f), join(tmp, f)));
    }
    await rename(tmp, to.snapshot);
    return { snapshot: true };
  }

  /** Forks need a disk switched under a running VMM, which this driver does not do yet. */
  async capture(vm: VmRef): Promise<{ id: string; paused_ms: number }> {
    throw new NotSupportedError(
      `vm ${vm.name}: the cloud-hypervisor driver cannot fork a running vm; clone it instead`,
    );
  }

  async dropCapture(): Promise<void> {}

  /** Its saved state's config names the paths it was saved under; taking in a moved vm is not done yet. */
  async takeIn(spec: VmSpec): Promise<void> {
    throw new NotSupportedError(
      `vm ${spec.name}: the cloud-hypervisor driver cannot take in a vm moved from another node`,
    );
  }

  async rename(from: VmRef, to: VmRef): Promise<void> {
    const v = this.live.get(from.name);
    if (!v) return;
    this.live.delete(from.name);
    this.live.set(to.name, { ...v, dir: to.dir });
  }

  // ---- lifecycle ----
  async launch(spec: VmSpec, options: LaunchOptions = {}): Promise<VmHandle> {
    if (this.live.has(spec.name)) throw new InvalidStateError(`vm ${spec.name} is already running`);
    if (spec.forwards.length) throw new NotSupportedError(NO_NETWORK);
    if (spec.mounts.length)
      throw new NotSupportedError(
        'cloud-hypervisor: host folder shares are not supported yet (docs/cloud-hypervisor.md)',
      );
    const l = chLayout(spec.dir);
    // the build of the image its disk stands on (one built anew since keeps it)
    const img = await this.o.images.get(spec.image, l.disk);
    if (img.boot === 'firmware')
      throw new NotSupportedError(
        `cloud-hypervisor: image ${img.id} boots through firmware, which this driver does not carry`,
      );
    const restoring = !!options.restore && existsSync(join(l.snapshot, 'config.json'));
    for (const s of [l.api, l.vsock]) await rm(s, { force: true });
    const args = [
      '--api-socket',
      `path=${l.api}`,
      ...(restoring ? ['--restore', `source_url=file://${l.snapshot}`] : []),
    ];
    const out = openSync(l.log, 'a');
    let child: ChildProcess;
    try {
      child = spawn(this.o.binary, args, { detached: true, stdio: ['ignore', out, out], env: childEnv() });
    } finally {
      closeSync(out);
    }
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', () => resolve());
      child.once('error', (err: NodeJS.ErrnoException) =>
        reject(
          err.code === 'ENOENT'
            ? new InvalidStateError(
                `cloud-hypervisor binary "${this.o.binary}" not found (cloud_hypervisor.binary; docs/cloud-hypervisor.md)`,
              )
            : err,
        ),
      );
    });
    child.unref();
    await writeFile(l.pidfile, String(child.pid));
    const api = new ChApi(l.api);
    const v = this.track(spec.name, { pid: child.pid!, api, dir: spec.dir, child });
    try {
      await api.ready(10_000);
      if (restoring) {
        // A restored VM waits paused (and stays so when asked); the restored state no longer
        // matches a disk that runs on.
        if (!options.paused) await api.put('vm.resume');
        await rm(l.snapshot, { recursive: true, force: true });
      } else {
        await rm(l.snapshot, { recursive: true, force: true });
        await api.put('vm.create', vmConfig(spec, img, l));
        await api.put('vm.boot');
      }
    } catch (err) {
      await this.killLive(spec.name, v);
      throw err;
    }
    this.o.log.info({ vm: spec.name, pid: v.pid, restored: restoring }, 'spawn timing');
    return this.handle(spec, v.pid, restoring);
  }

  private handle(vm: VmRef, pid: number, restored: boolean): VmHandle {
    const l = chLayout(vm.dir);
    return {
      ip: '',
      ssh_port: 0,
      agent_port: AGENT_VSOCK_PORT,
      agent_cid: GUEST_CID,
      agent_socket: l.vsock,
      forwards: [],
      pid,
      restored_from_snapshot: restored,
      state: toState<ChState>({ pid, api: l.api }),
    };
  }

  /** Watches a VMM process: its exit when the daemon is its parent, else its pid every 500 ms. */
  private track(name: string, v: Omit<LiveCh, 'expected' | 'gone'>): LiveCh {
    let done!: () => void;
    const entry: LiveCh = { ...v, expected: false, gone: new Promise<void>((r) => (done = r)) };
    this.live.set(name, entry);
    const finish = (reason: string) => {
      clearInterval(entry.poll);
      const current = [...this.live.entries()].find(([, x]) => x === entry)?.[0];
      if (current) this.live.delete(current);
      done();
      if (!entry.expected && current) for (const l of this.listeners) l(current, reason);
    };
    if (v.child)
      v.child.once('exit', (code, signal) => finish(signal ? `killed by ${signal}` : `exited with status ${code}`));
    else entry.poll = setInterval(() => !alive(v.pid) && finish('the cloud-hypervisor process is gone'), 500);
    return entry;
  }

  async stop(vm: VmRef, timeoutMs: number): Promise<void> {
    await rm(chLayout(vm.dir).snapshot, { recursive: true, force: true });
    const v = this.live.get(vm.name);
    if (!v) return;
    v.expected = true;
    await v.api.put('vm.power-button').catch(() => undefined);
    if (await waitGone(v, timeoutMs)) return;
    this.o.log.warn({ vm: vm.name, timeout_ms: timeoutMs }, 'guest ignored the power button; killing it');
    await this.killLive(vm.name, v);
  }

  async kill(vm: VmRef): Promise<void> {
    const v = this.live.get(vm.name);
    if (v) return this.killLive(vm.name, v);
    // One the daemon does not hold (a crash between spawn and record): its pidfile, checked by its command line.
    const l = chLayout(vm.dir);
    const pid = Number(await readFile(l.pidfile, 'utf8').catch(() => ''));
    if (!Number.isInteger(pid) || pid <= 1 || !isChOf(pid, l.api)) return;
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      return;
    }
    for (let i = 0; i < 100 && alive(pid); i++) await new Promise((r) => setTimeout(r, 50));
  }

  private async killLive(name: string, v: LiveCh): Promise<void> {
    v.expected = true;
    try {
      process.kill(v.pid, 'SIGKILL');
    } catch {
      // gone already
    }
    await waitGone(v, 10_000);
    this.live.delete(name);
  }

  async pause(vm: VmRef): Promise<void> {
    await this.running(vm.name).api.put('vm.pause');
  }

  async resume(vm: VmRef): Promise<void> {
    await this.running(vm.name).api.put('vm.resume');
  }

  private running(name: string): LiveCh {
    const v = this.live.get(name);
    if (!v) throw new InvalidStateError(`vm ${name} has no running cloud-hypervisor process`);
    return v;
  }

  /** Pauses, snapshots into `snapshot.tmp`, renames it (a snapshot counts once whole), and stops the VMM. */
  async suspend(vm: VmRef): Promise<{ snapshot: boolean }> {
    const v = this.running(vm.name);
    v.expected = true;
    const l = chLayout(vm.dir);
    const tmp = `${l.snapshot}.tmp`;
    let snapshot = false;
    try {
      await v.api.put('vm.pause');
      await rm(tmp, { recursive: true, force: true });
      await mkdir(tmp);
      await v.api.put('vm.snapshot', { destination_url: `file://${tmp}` });
      await rm(l.snapshot, { recursive: true, force: true });
      await rename(tmp, l.snapshot);
      snapshot = true;
    } catch (err) {
      this.o.log.warn({ vm: vm.name, err: (err as Error).message }, 'snapshot failed; restore will cold-boot');
      await rm(tmp, { recursive: true, force: true });
    }
    await v.api.put('vmm.shutdown').catch(() => undefined);
    if (!(await waitGone(v, 10_000))) await this.killLive(vm.name, v);
    this.live.delete(vm.name);
    return { snapshot };
  }

  async reattach(vm: VmRef, handle: VmHandle): Promise<VmHandle | null> {
    const s = fromState<ChState>(handle.state);
    const l = chLayout(vm.dir);
    if (!s.pid || !alive(s.pid) || !isChOf(s.pid, l.api)) return null;
    this.track(vm.name, { pid: s.pid, api: new ChApi(l.api), dir: vm.dir });
    return { ...this.handle(vm, s.pid, false) };
  }

  async hasSavedState(vm: VmRef): Promise<boolean> {
    return !this.live.has(vm.name) && existsSync(join(chLayout(vm.dir).snapshot, 'config.json'));
  }

  async growDisk(vm: VmRef, gb: number): Promise<void> {
    if (this.live.has(vm.name))
      throw new InvalidStateError(`vm ${vm.name} is running: its disk grows while it is stopped`);
    await growOverlay(chLayout(vm.dir).disk, gb, vm.name);
  }

  async destroy(vm: VmRef): Promise<void> {
    await this.kill(vm);
    const l = chLayout(vm.dir);
    for (const f of [l.disk, l.seed, l.api, l.vsock, l.pidfile, l.snapshot, `${l.snapshot}.tmp`])
      await rm(f, { recursive: true, force: true });
  }

  onExit(listener: ExitListener): void {
    this.listeners.push(listener);
  }

  /** Lets go of the VMMs (they keep running for the next daemon). */
  async release(): Promise<void> {
    for (const v of this.live.values()) {
      v.expected = true;
      clearInterval(v.poll);
    }
    this.live.clear();
  }

  /** Live VMM pids by VM name (tests). */
  pids(): Record<string, number> {
    return Object.fromEntries([...this.live].map(([n, v]) => [n, v.pid]));
  }
}

/** Is `pid` the VMM of the VM whose API socket is `api`? (A recycled pid is never taken for one.) */
function isChOf(pid: number, api: string): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(`path=${api}`);
  } catch {
    return false;
  }
}

function waitGone(v: LiveCh, ms: number): Promise<boolean> {
  return orAfter(
    v.gone.then(() => true),
    ms,
    false,
  );
}
