import { unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { PortForward } from '../../../domain/vm.js';
import type { Logger } from '../../../ports/logger.js';
import type { LaunchOptions, VmHandle, VmRef, VmSpec } from '../../../ports/hypervisor.js';
import type { Accel } from './accel-probe.js';
import { virtualSize } from '../../images/overlay.js';
import { restoreInputs, StartRetries } from './launch-plan.js';
import type { LiveVms } from './live-vms.js';
import type { NicLinks } from './nic-links.js';
import { processTag } from './qemu-args.js';
import { plugShares } from './share-plug.js';
import { layout } from './qemu-files.js';
import { runInBackground, spawnQemu } from './qemu-spawn.js';
import { qemuState, savedNic } from './qemu-state.js';
import type { RamImages } from './ram-image.js';
import { clearSaved, readSaved } from './saved-state.js';
import type { HeldQemu } from './spare-qemus.js';
import type { VmCommand } from './vm-command.js';

/** What a launch needs of the adapter around it (QemuHypervisor). */
export interface LauncherParts {
  o: { qemuBinary: string; log: Logger };
  live: LiveVms;
  command: VmCommand;
  links: NicLinks;
  ramImages: RamImages;
  /** A vsock context id for a VM starting now, or 0. */
  cid(): number;
  kill(vm: VmRef): Promise<void>;
  addForwards(vm: VmRef, forwards: PortForward[]): Promise<VmHandle>;
}

/**
 * How a VM's QEMU comes up: a process of its own (`spawn`: cold, or restoring a saved state, with
 * the starts again that QEMU's words call for: launch-plan.ts), or a spare QEMU a clone takes over
 * (`adopt`); then its disk grown to the spec (`growDisk`). A restored guest runs only once its
 * network is attached (NicLinks.up).
 */
export class QemuLauncher {
  constructor(private readonly d: LauncherParts) {}

  /**
   * Takes over the clone `spec`'s spare QEMU, restored and running: its network (attached under the
   * spare's name, letting nothing out) becomes the clone's, with the clone's policy and forwards.
   */
  async adopt(spec: VmSpec, q: HeldQemu, accel: Accel, options: LaunchOptions): Promise<VmHandle> {
    const live = this.d.live.track(spec.name, {
      pid: q.pid,
      qmp: q.qmp,
      child: q.child,
      expected: false,
      cid: 0,
      dir: spec.dir,
      spec,
    });
    if (options.background) runInBackground(q.pid);
    await clearSaved(spec.dir);
    // Its monitor and NIC sockets moved with its directory, where re-attach looks for them beside the disk it names.
    const state = qemuState({
      pid: q.pid,
      qmp: join(dirname(q.disk), 'qmp.sock'),
      net: q.net,
      tag: q.tag,
      disk: q.disk,
      accel,
    });
    live.handle = this.handle(spec, {
      pid: q.pid,
      ssh_port: q.sshPort,
      agent_port: q.agentPort,
      agent_cid: 0,
      forwards: [],
      restored_from_snapshot: true,
      state,
    });
    try {
      await this.d.links.adopt(q.name, spec, savedNic(spec.dir, state));
    } catch (err) {
      await this.d.kill(spec);
      throw err;
    }
    this.d.o.log.info(
      { vm: spec.name, pid: q.pid, accel, restored: true, spare: q.loaded ? 'warm' : 'held' },
      'spawn timing',
    );
    return this.d.addForwards(spec, spec.forwards);
  }

  private handle(spec: VmSpec, h: Omit<VmHandle, 'ip'>): VmHandle {
    return { ...h, ip: spec.overlay_ip ? spec.overlay_ip.split('/')[0] : '10.0.2.15' };
  }

  /**
   * A copy of a saved state made on a smaller disk (a create restored from its image's snapshot)
   * runs with the disk it was saved with: QEMU grows it to the spec's size, and the guest hears of
   * it (a virtio config interrupt) and grows its filesystem when told (the identity's disk_bytes).
   * A disk of the spec's size (every other launch) costs a read of its header.
   */
  async growDisk(spec: VmSpec): Promise<void> {
    const v = this.d.live.running(spec.name);
    const want = spec.disk_gb * 2 ** 30;
    // Read from the file's header: most launches have the size asked for, and ask QEMU nothing.
    const onDisk = await virtualSize(layout(spec.dir).disk).catch(() => undefined);
    if (onDisk !== undefined && onDisk >= want) return;
    const blocks = await v.qmp
      .execute<{ device: string; inserted?: { image: { 'virtual-size': number } } }[]>('query-block')
      .catch(() => undefined);
    const disk = Array.isArray(blocks) ? blocks.find((b) => b.device === 'virtio0')?.inserted : undefined;
    if (!disk || disk.image['virtual-size'] >= want) return;
    await v.qmp.execute('block_resize', { device: 'virtio0', size: want });
    this.d.o.log.info({ vm: spec.name, from: disk.image['virtual-size'], to: want }, 'disk grown to the spec');
  }

  async spawn(spec: VmSpec, options: LaunchOptions, accel: Accel): Promise<VmHandle> {
    const l = layout(spec.dir);
    const saved = options.restore ? await readSaved(spec.dir) : undefined;
    const retries = new StartRetries(!!saved);
    if (saved && spec.mounts.length && !this.d.command.sharesAfterLoad) {
      this.d.o.log.warn({ vm: spec.name }, 'virtio-fs shares are attached when a guest boots; cold-booting');
      retries.coldBoot('virtio-fs shares are attached when a guest boots, not to a restored one');
    } else if (saved?.kind === 'image' && !this.d.ramImages.fits(spec)) {
      this.d.o.log.warn({ vm: spec.name }, 'a ram image cannot back this vm; cold-booting');
      retries.coldBoot('a RAM image cannot back this VM (qemu.ram_images is off)');
    }
    for (;;) {
      const nic = await this.d.command.nic(spec, l);
      const cid = this.d.cid();
      // What this start loads: a loaded guest waits for its `cont` (-S), a cold boot runs at once.
      const loading = retries.restoring ? saved : undefined;
      const restore = restoreInputs(spec.dir, loading);
      const args = await this.d.command.args(spec, { nic, vsockCid: cid || undefined, ...restore.args });
      await unlink(l.qmp).catch(() => undefined);
      const t0 = Date.now();
      const started = await spawnQemu({
        binary: this.d.o.qemuBinary,
        args,
        dir: spec.dir,
        disk: l.disk,
        qmp: l.qmp,
        stateFile: restore.stateFile,
        ramImage: restore.ramImage,
        // A loaded guest runs once its network is attached (below): not before (NicLinks.up).
        run: false,
      });
      if (started instanceof Error) {
        await retries.next(spec.name, started.message, this.d.o.log);
        continue;
      }
      const { qmp, child } = started;
      const pid = child.pid!;
      const live = this.d.live.track(spec.name, { pid, qmp, child, expected: false, cid, dir: spec.dir, spec });
      if (options.background) runInBackground(pid);
      // A cold boot's guest runs already: the saved state no longer matches the disk.
      if (saved && !loading) await clearSaved(spec.dir);
      let ports;
      try {
        ports = await this.d.links.up(spec, nic, spec.forwards, spec.egress, { pid, qmp });
      } catch (err) {
        await this.d.kill(spec);
        throw err;
      }
      if (loading) {
        // The loaded guest runs now that its network is there (unless it is to stay paused); a QEMU
        // that dies at this point is one that died restoring (the state is kept for the next try).
        // Then its shares are plugged in (share-plug.ts): no saved state holds one.
        const failed = await (options.paused ? Promise.resolve() : qmp.execute('cont'))
          .then(() => plugShares(qmp, spec.mounts))
          .then(
            () => undefined,
            (err: Error) => err,
          );
        if (failed) {
          await this.d.kill(spec);
          await retries.next(spec.name, failed.message, this.d.o.log);
          continue;
        }
        await clearSaved(spec.dir);
      }
      this.d.o.log.info(
        { vm: spec.name, pid, accel, restored: retries.restoring, spawn_ms: Date.now() - t0 },
        'spawn timing',
      );
      const handle = this.handle(spec, {
        ...ports,
        agent_cid: cid,
        pid,
        restored_from_snapshot: retries.restoring,
        state: qemuState({
          pid,
          qmp: l.qmp,
          net: nic.kind === 'netd' ? nic.socket : undefined,
          tag: processTag(spec.name),
          disk: l.disk,
          accel,
        }),
      });
      if (retries.coldWhy) handle.cold_boot_reason = retries.coldWhy;
      live.handle = handle;
      return { ...handle, forwards: [...handle.forwards] };
    }
  }
}
