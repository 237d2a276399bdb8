import { dirname, join } from 'node:path';
import type { Logger } from '../../../ports/logger.js';
import type { VmHandle, VmRef } from '../../../ports/hypervisor.js';
import { fromState, toState } from '../adapter-state.js';
import type { Accel } from './accel-probe.js';
import { nicSocketNow } from './nic-links.js';
import { processTag } from './qemu-args.js';
import { alive, isQemuOf, layout } from './qemu-files.js';
import { QmpClient } from './qmp-client.js';

/** What the record keeps for re-attaching (the adapter state). */
export interface QemuState {
  pid: number;
  qmp: string;
  /** The NIC's socket svc-netd connects to, where QEMU was started (none: QEMU's own user-mode network). */
  net?: string;
  tag: string;
  disk: string;
  accel: Accel;
  started_at: string;
  /** Records written before the state was typed nested it here. */
  runtime?: Omit<QemuState, 'runtime'>;
}

/**
 * The state a launch records. `disk` is the disk path QEMU's command line shows (a spare's until
 * it was taken): re-attach checks it. A monitor socket beside that disk moves with the directory.
 */
export function qemuState(s: Omit<QemuState, 'started_at' | 'runtime'>): VmHandle['state'] {
  return toState<QemuState>({ ...s, started_at: new Date().toISOString() });
}

/**
 * The QEMU a VM's record names, connected over its monitor; null when it is gone or the pid is no
 * longer this VM's QEMU (a recycled pid belongs to something else: its command line must show the
 * tag and disk path the launch recorded; a renamed pool member, or a clone that took a spare,
 * still shows the ones it was started with). One that runs but whose monitor does not answer is
 * killed rather than left running unrecorded.
 */
export async function findQemu(
  vm: VmRef,
  handle: VmHandle,
  log: Logger,
): Promise<{ pid: number; qmp: QmpClient } | null> {
  const saved = fromState<QemuState>(handle.state);
  const rt = saved.runtime ?? saved;
  const pid = rt.pid ?? handle.pid;
  if (!pid || !alive(pid)) return null;
  if (!isQemuOf(pid, rt.tag ?? processTag(vm.name), rt.disk ?? layout(vm.dir).disk)) return null;
  try {
    // A socket inside the VM directory moved with it (its old directory may belong to another VM
    // by now); one in the temp dir (long paths) stayed where it was.
    const inDir = !rt.qmp || (rt.disk !== undefined && rt.qmp === join(dirname(rt.disk), 'qmp.sock'));
    return { pid, qmp: await QmpClient.connect(inDir ? layout(vm.dir).qmp : rt.qmp!, 3000) };
  } catch {
    log.warn({ vm: vm.name, pid }, 'qemu runs but its monitor does not answer; killing it');
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
    return null;
  }
}

/** Where the NIC socket of the QEMU a record names is now (undefined: QEMU's own user-mode network). */
export function savedNic(vmDir: string, state: VmHandle['state']): string | undefined {
  const saved = fromState<QemuState>(state);
  const rt = saved.runtime ?? saved;
  return nicSocketNow(vmDir, rt.net, rt.disk);
}
