import type { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { EgressPolicy } from '../../../domain/egress.js';
import type { Forward, PortForward } from '../../../domain/vm.js';
import type { VmRef, VmSpec } from '../../../ports/hypervisor.js';
import type { Logger } from '../../../ports/logger.js';
import { NO_EGRESS, type NetdGuestNetwork } from '../../guest-net/netd-guest-network.js';
import { freePort, portFree } from '../free-port.js';
import { AlreadyExistsError } from '../../../domain/errors.js';
import type { GuestNic } from './qemu-args.js';
import type { QmpClient, QmpEvent } from './qmp-client.js';

/** The host ports a running VM answers on. */
export interface VmPorts {
  ssh_port: number;
  agent_port: number;
  forwards: Forward[];
}

const SSH = 22;
const AGENT = 7475;
/** How long a launch waits for QEMU to take svc-netd's connection (it does within a turn of its loop). */
const ACCEPT_MS = 5_000;

/**
 * Resolves true once QEMU has taken the connection to its NIC's socket (`NETDEV_STREAM_CONNECTED`),
 * watched from the call on; false after `ms` or when the monitor closes. QEMU 7.2's stream netdev
 * has no channel until then, and a packet handed to it is written through a null one: a restored
 * guest's packets, queued while it was paused and flushed by `cont`, segfaulted QEMU
 * (`object_get_class` from `qio_channel_writev`, a core dump of 2026-11-30; docs/qemu.md).
 */
export function streamAccepted(qmp: Pick<EventEmitter, 'on' | 'off'>, ms = ACCEPT_MS): Promise<boolean> {
  return new Promise((resolve) => {
    const end = (ok: boolean) => {
      clearTimeout(timer);
      qmp.off('event', on);
      qmp.off('close', closed);
      resolve(ok);
    };
    const on = (e: QmpEvent) => {
      if (e.event === 'NETDEV_STREAM_CONNECTED') end(true);
    };
    const closed = () => end(false);
    const timer = setTimeout(() => end(false), ms).unref();
    qmp.on('event', on);
    qmp.on('close', closed);
  });
}

/**
 * The host's side of a QEMU VM's NIC: with svc-netd (the default) the VM's network is attached
 * there once QEMU listens, follows the VM when it is renamed or taken by a clone, and is detached
 * when QEMU stops; with QEMU's own user-mode network (test_mode) the ports were on the command
 * line and forwards are added over the monitor.
 */
export class NicLinks {
  constructor(private readonly o: { net?: NetdGuestNetwork; log: Logger }) {}

  /**
   * A QEMU just started with `nic` for `vm`: its network attached with SSH, the agent and `forwards`
   * (host port 0: picked) and `policy`. Resolves with the ports bound, once QEMU has taken the
   * connection (so a guest let run after it has a channel to send on: streamAccepted). AlreadyExistsError
   * for a busy host port (the caller stops the QEMU).
   */
  async up(
    vm: VmRef,
    nic: GuestNic,
    forwards: PortForward[],
    policy: EgressPolicy | undefined,
    qemu: { pid: number; qmp: Pick<EventEmitter, 'on' | 'off'> },
  ): Promise<VmPorts> {
    if (nic.kind === 'qemu-user')
      return {
        ssh_port: nic.sshPort,
        agent_port: nic.agentPort,
        forwards: nic.forwards.map((f) => ({ ...f, kind: 'boot', pid: qemu.pid })),
      };
    const accepted = streamAccepted(qemu.qmp);
    const bound = await this.netd.attach(
      vm,
      nic.socket,
      [{ host_port: 0, guest_port: SSH, proto: 'tcp' }, { host_port: 0, guest_port: AGENT, proto: 'tcp' }, ...forwards],
      policy ?? NO_EGRESS,
    );
    if (!(await accepted)) this.o.log.warn({ vm: vm.name }, 'qemu did not say it took the network connection');
    return { ssh_port: bound[0].host_port, agent_port: bound[1].host_port, forwards: bound.slice(2) };
  }

  private get netd(): NetdGuestNetwork {
    if (!this.o.net) throw new Error('no svc-netd configured');
    return this.o.net;
  }

  /** The VM's QEMU stopped: its network goes. Never throws. */
  async down(name: string): Promise<void> {
    if (!this.o.net) return;
    await this.o.net
      .detach(name)
      .catch((err: Error) => this.o.log.warn({ vm: name, err: err.message }, 'cannot detach the vm network'));
  }

  /** A VM's network follows it to a new name and directory; the NIC's socket is now at `socket`. */
  async moved(from: string, to: VmRef, socket: string | undefined): Promise<void> {
    if (!this.o.net || !socket) return;
    await this.o.net.rename(from, to, socket);
  }

  /** A clone took a spare QEMU (attached under the spare's name, letting nothing out): now it is the clone's. */
  async adopt(spare: string, spec: VmSpec, socket: string | undefined): Promise<void> {
    if (!this.o.net || !socket) return;
    await this.o.net.rename(spare, spec, socket);
    await this.o.net.setPolicy(spec, spec.egress ?? NO_EGRESS);
  }

  /** Adds host forwards to a running VM. AlreadyExistsError for a busy host port. */
  async forward(vm: VmRef, qmp: QmpClient, forwards: PortForward[], qemuPid: number): Promise<Forward[]> {
    if (this.o.net && forwards.length) return this.o.net.forward(vm.name, forwards);
    const out: Forward[] = [];
    for (const f of forwards) {
      if (f.host_port && !(await portFree(f.host_port, f.proto)))
        throw new AlreadyExistsError(`host port ${f.host_port}/${f.proto} is busy`);
      const host_port = f.host_port || (await freePort(f.proto));
      await qmp.hmp(`hostfwd_add net0 ${f.proto}:127.0.0.1:${host_port}-:${f.guest_port}`);
      out.push({ ...f, host_port, kind: 'boot', pid: qemuPid });
    }
    return out;
  }

  /**
   * After a daemon restart: a VM found running has its network in svc-netd still (which outlived the
   * daemon, or took it back from its state file after a restart of its own); when not, it is
   * attached again with the ports the record kept, letting nothing out until the policy is set.
   * A VM whose QEMU an older daemon started on QEMU's own network (no socket) keeps that network.
   */
  async reattach(vm: VmRef, socket: string | undefined, ports: VmPorts): Promise<void> {
    if (!this.o.net) return;
    if (!socket || !existsSync(socket)) {
      this.o.log.warn(
        { vm: vm.name },
        "this vm runs on qemu's own user-mode network (started by an older svcd): no egress policy until it is restarted",
      );
      return;
    }
    if (await this.o.net.attached(vm.name)) return;
    await this.o.net.attach(
      vm,
      socket,
      [
        { host_port: ports.ssh_port, guest_port: SSH, proto: 'tcp' },
        { host_port: ports.agent_port, guest_port: AGENT, proto: 'tcp' },
        ...ports.forwards,
      ],
      NO_EGRESS,
    );
  }
}

/**
 * Where a VM's NIC socket is now, from where its QEMU was started (`net`, beside `disk`): a socket
 * beside the disk moved with the files into the VM's directory (a renamed pool member, a clone that
 * took a spare); one in the temp dir (long paths) stayed where it was.
 */
export function nicSocketNow(vmDir: string, net: string | undefined, disk: string | undefined): string | undefined {
  if (!net) return undefined;
  return disk && dirname(net) === dirname(disk) ? join(vmDir, basename(net)) : net;
}
