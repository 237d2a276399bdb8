import type { OnExpire } from './lifetime.js';
import type { EgressSecretBinding } from './egress-secrets.js';
import type { EgressPolicy } from './egress.js';
import type { EntrypointChoice } from './restart-policy.js';
import type { VmSnapshot } from './snapshots.js';
import type { KeptOutput, VmTimeline } from './timeline.js';
import { InternalError, InvalidStateError } from './errors.js';

export const VM_STATUSES = ['creating', 'running', 'paused', 'suspended', 'stopped', 'error'] as const;
export type VmStatus = (typeof VM_STATUSES)[number];

export type Proto = 'tcp' | 'udp';

/** A host port (on 127.0.0.1) forwarded to a guest port. */
export interface PortForward {
  host_port: number;
  guest_port: number;
  proto: Proto;
}

/**
 * A forward as an Instance shows it: `boot` ones come with the VM's network (its create's forwards,
 * and the ones added to a running VM's network), `live` ones are SSH tunnels (POST /forwards).
 * `pid` is the process that carries it while it is open.
 */
export interface Forward extends PortForward {
  kind: 'boot' | 'live';
  pid?: number;
}

export interface Mount {
  host: string;
  guest: string;
  tag?: string;
  readonly?: boolean;
}

/** The tag a mount is known by in the guest (`tag`, else mount0, mount1, ...: its place in the list). */
export function mountTag(m: Mount, i: number): string {
  return m.tag ?? `mount${i}`;
}

/**
 * The public shape of a VM, as the API returns it (`Instance` is the spec's name for it, kept in the
 * API and the client; inside the daemon a VM is `Vm...`: VmRecord, VmStore, VmLifecycle). `userdata` is
 * never part of it.
 */
export interface Instance {
  name: string;
  status: VmStatus;
  suspended_at?: string;
  persistent: boolean;
  cpus: number;
  memory_mb: number;
  disk_gb: number;
  image: string;
  ip: string;
  ssh_port: number;
  agent_port: number;
  agent_cid: number;
  /**
   * Its process on the host (QEMU's), while it runs. A clone that took a QEMU started ahead for
   * it shows in `ps` under that spare's name (a running process cannot be renamed): this says which.
   */
  pid?: number;
  forwards: Forward[];
  tags: Record<string, string>;
  mounts: Mount[];
  metrics_enabled: boolean;
  created_at: string;
  updated_at: string;
  error?: string;
  /** The template this VM was cloned from. */
  from?: string;
  /** In a cluster: the node it is on (docs/cluster.md); the node that has it says so. */
  node?: string;
  /** When its lifetime ends (docs/api.md, "Lifetime"), and what that does; absent: it lives until deleted. */
  expires_at?: string;
  on_expire?: OnExpire;
  /** What its guest may reach beyond its own network (docs/network.md). */
  egress: EgressPolicy;
  /** Host secrets put into its requests on the way out, to their hosts only (docs/egress-secrets.md). */
  egress_secrets?: EgressSecretBinding[];
  /**
   * Only in the answer of the call it is about: a restore, or a clone of a suspended template,
   * whose saved state did not load, which cold-booted the VM (its guest's processes ended or did
   * not come along), and why.
   */
  warning?: string;
}

declare const adapterStateBrand: unique symbol;
/**
 * What a hypervisor adapter keeps in a VM's record to find its process again after a daemon
 * restart. Opaque: the daemon stores it and hands it back; only the adapter that made it reads it.
 */
export type AdapterState = { readonly [adapterStateBrand]: 'adapter-state' };

/**
 * What the daemon persists for a VM: the public Instance plus what only the host needs.
 * `runtime` is the hypervisor's opaque state for re-attaching after a daemon restart.
 */
export interface VmRecord extends Instance {
  userdata?: string;
  /**
   * The create asked not to run its image's entrypoint at boot (false), or to restart it by a policy
   * (CreateRequest.entrypoint); absent: it runs as it is.
   */
  entrypoint?: EntrypointChoice;
  runtime?: AdapterState;
  /** Set on warm pool members (the template's name); they are hidden from listings until claimed. */
  pool?: string;
  /** Overlay segment address with prefix (network: overlay); `ip` shows it without the prefix. */
  overlay_ip?: string;
  /** Saved before a delete destroys anything: a daemon that dies mid-delete finishes it at start. */
  deleting?: boolean;
  /** Its image has no agent and none was deployed yet (agent routes answer 503 saying to deploy it). */
  agent_missing?: boolean;
  /** Where its VMM takes hybrid vsock connections to the agent, while it runs (drivers that have one). */
  agent_socket?: string;
  /** Being moved to this node (cluster): a daemon that dies meanwhile asks the cluster who has it. */
  leaving?: string;
  /** Moved here from this node, until the cluster says it is this node's (cluster). */
  arriving?: string;
  /**
   * Its guest was told to let go of its host folders for a save (a suspend, a fork's capture),
   * saved before it is told: until they are back (or the guest is saved, or stops), a daemon that
   * dies and starts again gives them back (guest-shares.ts).
   */
  shares_out?: boolean;
  /**
   * A save of its guest is under way (a suspend, a fork's capture), marked before it begins: its
   * guest may be stopped for it. A daemon that dies in it and finds the VM still running at start
   * (the save was not finished) has its guest run on (recovery-service.ts).
   */
  saving?: boolean;
  /** Its named snapshots, oldest first (docs/snapshots.md); their files are the hypervisor's. */
  snapshots?: VmSnapshot[];
  /** Which history of its guest it is on, once reverted (domain/timeline.ts); none: the first. */
  timeline?: VmTimeline;
  /**
   * While suspended or paused: what its processes and watches had written when it was saved or
   * paused, as a snapshot of a running guest notes it (a snapshot of the held guest takes it).
   */
  saved_output?: KeptOutput;
  /**
   * Restored paused (a paused VM moved here) and not resumed since: its guest has not run since its
   * saved state loaded, and what a restore does as the guest wakes (its clock, its folders, the
   * readiness wait) is done at its resume.
   */
  wake_at_resume?: boolean;
}

export function toPublic(record: VmRecord): Instance {
  const {
    userdata: _u,
    entrypoint: _e,
    runtime: _r,
    pool: _p,
    overlay_ip: _o,
    deleting: _d,
    agent_missing: _a,
    agent_socket: _s,
    leaving: _l,
    arriving: _v,
    shares_out: _h,
    saving: _g,
    snapshots: _n,
    timeline: _t,
    saved_output: _k,
    wake_at_resume: _w,
    ...pub
  } = record;
  if (pub.status !== 'suspended') delete pub.suspended_at;
  if (pub.status !== 'error') delete pub.error;
  return {
    ...pub,
    forwards: pub.forwards.map((f) => ({ ...f })),
    egress: { ...pub.egress, allow: [...pub.egress.allow], deny: [...pub.egress.deny] },
    ...(pub.egress_secrets ? { egress_secrets: pub.egress_secrets.map((b) => ({ ...b, hosts: [...b.hosts] })) } : {}),
  };
}

export type LifecycleVerb = 'start' | 'shutdown' | 'pause' | 'resume' | 'suspend' | 'restore';

/** Allowed source states per verb (decisions.md, "States"). */
export const ALLOWED_SOURCES: Record<LifecycleVerb, readonly VmStatus[]> = {
  start: ['stopped', 'error'],
  shutdown: ['running', 'paused', 'suspended', 'stopped'],
  pause: ['running'],
  resume: ['paused'],
  suspend: ['running', 'paused'],
  restore: ['suspended'],
};

/** What to tell a caller who used the wrong verb: the verb that fits the current status. */
const HINT: Record<VmStatus, string> = {
  creating: 'wait for the create to finish',
  running: 'use pause, suspend or shutdown',
  paused: 'use resume',
  suspended: 'use restore',
  stopped: 'use start',
  error: 'use start or delete',
};

/** Throws InvalidStateError (with a hint) unless `verb` may run from the record's status. */
export function assertTransition(record: Pick<VmRecord, 'name' | 'status' | 'persistent'>, verb: LifecycleVerb): void {
  const { name, status } = record;
  if (verb === 'suspend' && !record.persistent) {
    throw new InvalidStateError(`vm ${name} is ephemeral; only persistent vms can be suspended`);
  }
  if (verb === 'start' && !record.persistent && status === 'error') {
    throw new InvalidStateError(`vm ${name} is ephemeral and failed; delete it and create a new one`);
  }
  if (ALLOWED_SOURCES[verb].includes(status)) return;
  const already =
    (verb === 'pause' && status === 'paused') ||
    (verb === 'start' && status === 'running') ||
    (verb === 'suspend' && status === 'suspended') ||
    (verb === 'resume' && status === 'running');
  const what = already ? `already ${status}` : status;
  throw new InvalidStateError(`vm ${name} is ${what}; ${HINT[status]}`);
}

/** Statuses in which a hypervisor process exists for the VM. */
export function hasProcess(status: VmStatus): boolean {
  return status === 'running' || status === 'paused' || status === 'creating';
}

/** Resources a VM holds against the caps: suspended and stopped VMs hold none. */
export function holdsResources(status: VmStatus): boolean {
  return hasProcess(status);
}

/**
 * A status change as the control plane sees it happen: a process up (`running`: a create, start,
 * restore or resume), frozen (`paused`), gone on purpose (`stopped`, `suspended` with the time) or
 * on its own (`error` with why), or a warm pool member handed out (`creating` again, until ready).
 */
export type StatusChange =
  | { to: 'running' | 'paused' | 'stopped' | 'creating' }
  | { to: 'suspended'; at: string }
  | { to: 'error'; error: string };

/**
 * Which status may follow which: the one rule every change goes through (the verbs' own sources,
 * ALLOWED_SOURCES, are checked before they start). `creating` follows `suspended` or `running` only
 * for a claimed pool member; `suspended` follows `running` also when a restart finds the adapter
 * finished a suspend the daemon did not record.
 */
const NEXT: Record<VmStatus, readonly VmStatus[]> = {
  creating: ['running', 'error'],
  running: ['paused', 'stopped', 'suspended', 'error', 'creating'],
  paused: ['running', 'stopped', 'suspended', 'error'],
  // A restore may leave the guest paused (a paused VM's move: wake_at_resume).
  suspended: ['running', 'paused', 'stopped', 'error', 'creating'],
  // A revert to a snapshot lays its saved state on a stopped VM (docs/snapshots.md).
  stopped: ['running', 'error', 'suspended'],
  error: ['running', 'error', 'stopped', 'suspended'],
};

/**
 * Moves the record to its next status, with the fields that go with it (`suspended_at` while
 * suspended, `error` while in error, neither otherwise). InternalError for a change the rule does
 * not allow: a bug, never a caller's mistake.
 */
export function changeStatus(
  record: Pick<VmRecord, 'name' | 'status' | 'suspended_at' | 'error' | 'saved_output' | 'wake_at_resume'>,
  change: StatusChange,
): void {
  if (!NEXT[record.status].includes(change.to))
    throw new InternalError(`vm ${record.name}: no change from ${record.status} to ${change.to}`);
  record.status = change.to;
  if (change.to === 'suspended') record.suspended_at = change.at;
  else delete record.suspended_at;
  // Noted for a held guest only: one that runs again writes on.
  if (change.to !== 'suspended' && change.to !== 'paused') delete record.saved_output;
  if (change.to !== 'paused') delete record.wake_at_resume;
  if (change.to === 'error') record.error = change.error;
  else delete record.error;
}

/**
 * What belonged to a stopped process goes (its ports, pids, the adapter's state); forwards stay in
 * the record: boot ones keep their host ports, live ones are opened again when the VM is up.
 */
export function clearRuntime(record: VmRecord): void {
  record.ssh_port = 0;
  record.agent_port = 0;
  record.agent_cid = 0;
  delete record.pid;
  record.forwards = record.forwards.map(({ pid: _p, ...f }) => f);
  delete record.runtime;
  delete record.agent_socket;
  delete record.shares_out;
  delete record.saving;
  delete record.wake_at_resume;
}

/**
 * The header of a console log answer (`GET /vms/{name}/logs`) that gives the byte of the log it
 * starts at: a reader comes back with `from=` that plus what it read, and nothing is shown twice.
 */
export const LOG_OFFSET_HEADER = 'X-Svc-Log-Offset';
