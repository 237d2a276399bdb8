import type { EgressSecretBinding } from '../../domain/egress-secrets.js';
import type { EgressEvent, EgressPolicy } from '../../domain/egress.js';
import type { PortForward } from '../../domain/vm.js';

/**
 * svc-netd's control protocol, over its Unix socket: one JSON object a line each way. A request
 * carries an `id` and an `op`; its answer the same `id` with `ok` and a `result` or an `error`.
 * Lines with `event` are pushed to every client (egress decisions as they happen).
 */
export const NETD_PROTOCOL = 1;

/** One VM's network as the daemon asks for it; svc-netd keeps these in its state file. */
export interface NetAttachment {
  vm: string;
  /** QEMU's end of the link (`-netdev stream,server=on`). */
  socket: string;
  forwards: PortForward[];
  policy: EgressPolicy;
  /** Where its egress decisions are logged (JSON lines, capped). */
  log: string;
  /** Its egress secrets (docs/egress-secrets.md): placeholders and hosts, never values. */
  secrets?: NetSecrets;
}

/** A VM's egress secrets as svc-netd keeps them: the bindings, and where its CA is (`<prefix>.crt`, `<prefix>.key`). */
export interface NetSecrets {
  ca: string;
  bindings: EgressSecretBinding[];
}

export type NetRequest =
  | { op: 'hello' }
  | { op: 'attach'; attachment: NetAttachment }
  | { op: 'detach'; vm: string }
  | { op: 'rename'; from: string; to: string; socket: string; log: string }
  | { op: 'policy'; vm: string; policy: EgressPolicy }
  /** Sets the VM's egress secrets (none: off); answers `{ca_pem}`, the VM's CA, made on first use. */
  | { op: 'secrets'; vm: string; secrets: NetSecrets }
  | { op: 'forward'; vm: string; forwards: PortForward[] }
  | { op: 'unforward'; vm: string; host_port: number; proto: 'tcp' | 'udp' }
  | { op: 'list' }
  /** Save state and exit (a newer build takes over; connections end, the VMs' networks do not). */
  | { op: 'shutdown' };

export interface NetHello {
  protocol: number;
  build: string;
  pid: number;
}

export interface NetListed extends NetAttachment {
  connected: boolean;
  tcp: number;
  udp: number;
  bad_frames: number;
}

export type NetAnswer =
  { id: number; ok: true; result?: unknown } | { id: number; ok: false; error: string; code?: string };

export interface NetEgressLine {
  event: 'egress';
  entry: EgressEvent;
}

/** The largest control line either side reads. */
export const MAX_LINE = 1 << 20;
