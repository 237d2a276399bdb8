import { join } from 'node:path';
import type { EgressSecretBinding } from '../../domain/egress-secrets.js';
import type { EgressEvent, EgressPolicy } from '../../domain/egress.js';
import { NotFoundError } from '../../domain/errors.js';
import type { GuestNetwork } from '../../ports/guest-network.js';
import type { VmRef } from '../../ports/hypervisor.js';
import { readNdjsonTail } from '../fs-kit/ndjson-log.js';
import type { Forward, PortForward } from '../../domain/vm.js';
import type { NetdClient } from './netd-client.js';

/** A VM's egress log, in its directory (it moves with it). */
export const egressLog = (dir: string) => join(dir, 'egress.log');

/** A policy that lets nothing out (a spare QEMU's guest talks only to the daemon, through forwards). */
export const NO_EGRESS: EgressPolicy = Object.freeze({ default: 'deny', allow: [], deny: [] }) as EgressPolicy;

/**
 * VMs' networks in svc-netd: what a hypervisor driver asks for when it starts, moves and stops a
 * VM (attach, rename, detach, forwards), and the GuestNetwork port the use cases see.
 */
export class NetdGuestNetwork implements GuestNetwork {
  constructor(private readonly client: NetdClient) {}

  /**
   * Connects the VM's link (QEMU listens on `socket`) and binds its forwards; resolves with them as
   * bound (`boot` forwards carried by svc-netd). AlreadyExistsError for a busy host port.
   */
  async attach(vm: VmRef, socket: string, forwards: PortForward[], policy: EgressPolicy): Promise<Forward[]> {
    const r = await this.client.call<{ forwards: (PortForward & { pid: number })[] }>({
      op: 'attach',
      attachment: { vm: vm.name, socket, log: egressLog(vm.dir), forwards, policy },
    });
    return r.forwards.map((f) => ({ ...f, kind: 'boot' }));
  }

  /** The VM's network is gone (its process stopped). Idempotent. */
  async detach(name: string): Promise<void> {
    await this.client.call({ op: 'detach', vm: name });
  }

  /** Follows a VM to its new name and directory (a clone taking a spare, a claimed pool member); its link's socket is now `socket`. */
  async rename(from: string, to: VmRef, socket: string): Promise<void> {
    await this.client.call({ op: 'rename', from, to: to.name, socket, log: egressLog(to.dir) });
  }

  async forward(name: string, forwards: PortForward[]): Promise<Forward[]> {
    return (
      await this.client.call<{ forwards: (PortForward & { pid: number })[] }>({ op: 'forward', vm: name, forwards })
    ).forwards.map((f) => ({ ...f, kind: 'boot' }));
  }

  /** Is the VM's network attached (after a daemon restart: svc-netd kept it)? */
  async attached(name: string): Promise<boolean> {
    const list = await this.client.call<{ vm: string; connected: boolean }[]>({ op: 'list' });
    return list.some((v) => v.vm === name && v.connected);
  }

  async setPolicy(vm: VmRef, policy: EgressPolicy): Promise<void> {
    try {
      await this.client.call({ op: 'policy', vm: vm.name, policy });
    } catch (err) {
      if (!(err instanceof NotFoundError)) throw err;
    }
  }

  async setSecrets(vm: VmRef, bindings: EgressSecretBinding[]): Promise<{ ca_pem?: string }> {
    try {
      return await this.client.call<{ ca_pem?: string }>({
        op: 'secrets',
        vm: vm.name,
        secrets: { ca: join(vm.dir, 'egress-ca'), bindings },
      });
    } catch (err) {
      if (err instanceof NotFoundError) return {};
      throw err;
    }
  }

  log(vm: VmRef, query: { limit: number; sinceMs?: number }): Promise<EgressEvent[]> {
    const since = query.sinceMs;
    return readNdjsonTail<EgressEvent>(
      egressLog(vm.dir),
      query.limit,
      since === undefined ? undefined : (e) => Date.parse(e.t) >= since,
    );
  }

  watch(listener: (e: EgressEvent) => void): () => void {
    return this.client.onEgress(listener);
  }

  close(): void {
    this.client.close();
  }
}
