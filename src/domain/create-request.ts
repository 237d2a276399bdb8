import { parseDuration } from './duration.js';
import { parseEgressSecretSpecs, type EgressSecretSpec } from './egress-secrets.js';
import { parseEgressPolicy, type EgressPolicy } from './egress.js';
import { assertSnapshotName } from './snapshots.js';
import { InvalidArgumentError, shown } from './errors.js';
import { mountTag, type Mount, type PortForward } from './vm.js';
import { assertNewVmName, assertVmName, isObject } from './names.js';
import { USERDATA_MAX_BYTES } from './agent.js';
import { parseOnExpire, parseTtl, type OnExpire } from './lifetime.js';
import { parseEntrypointChoice, type EntrypointRestart } from './restart-policy.js';

export interface CreateRequest {
  name?: string;
  persistent: boolean;
  cpus?: number;
  memory_mb?: number;
  disk_gb?: number;
  image?: string;
  tags: Record<string, string>;
  userdata?: string;
  forwards: PortForward[];
  mounts: Mount[];
  metrics_enabled?: boolean;
  /** Clone this template (a persistent VM, stopped or suspended) instead of booting the image. */
  from?: string;
  /** With `from`: the VM as it was at this named snapshot of it (docs/snapshots.md), whatever it does now. */
  snapshot?: string;
  /** Claim a member of the warm pool instead of creating one. */
  from_pool?: boolean;
  /** What the guest may reach (docs/network.md); omitted: the template's (clones), else the config's `egress`. */
  egress?: EgressPolicy;
  /** Host secrets for its egress (docs/egress-secrets.md); omitted: the template's (clones, with new placeholders). */
  egress_secrets?: EgressSecretSpec[];
  /** Its lifetime from the create, in ms (docs/api.md, "Lifetime"); omitted: until deleted. */
  ttl_ms?: number;
  /** What its end does: delete (default) or suspend. */
  on_expire?: OnExpire;
  /**
   * Run the image's entrypoint (a container image's Entrypoint and Cmd) as a durable process
   * tagged `entrypoint` at each cold boot; omitted: true. `{restart, max_restarts?}`: run it, and
   * again when it ends by that policy (docs/processes.md, "Restarting"). A clone's is its template's.
   */
  entrypoint?: boolean | EntrypointRestart;
}

export const WAIT_MODES = ['auto', 'ssh', 'agent', 'userdata', 'bootstrap'] as const;
export type WaitMode = (typeof WAIT_MODES)[number];

/**
 * The disk of a create that names none: the config's `disk_gb`, or the image's least when that is
 * more (an image baked from a VM is as large as that VM's disk). Image snapshots boot with it too,
 * so such a create restores one with nothing to grow.
 */
export function defaultDiskGb(configured: number, image: { min_disk_gb: number }): number {
  return Math.max(configured, image.min_disk_gb);
}

/**
 * The memory of a create that names none: the config's `memory_mb`, or the image's least when that
 * is more. An image's snapshot in the default shape is made with it, so such a create restores it.
 */
export function defaultMemoryMb(configured: number, image: { min_memory_mb?: number }): number {
  return Math.max(configured, image.min_memory_mb ?? 0);
}

/** A VM's vCPUs against the most the hypervisor gives one (Hypervisor.maxCpus); 400 past it. */
export function checkCpus(cpus: number, max: number | undefined): void {
  if (max && cpus > max)
    throw new InvalidArgumentError(
      `cpus ${cpus} is more than one vm may have on this host (${max}: its CPUs, unless the hypervisor's config sets max_vm_cpus)`,
    );
}

export const LIMITS = {
  cpus: [1, 64],
  memory_mb: [64, 262_144],
  disk_gb: [1, 2048],
  userdataBytes: USERDATA_MAX_BYTES,
  tags: 64,
  /** Characters of a tag's value: tags come back in every listing and event. */
  tagValue: 2048,
  /** Host folders per VM: each is a device of its own (QEMU gives them PCI slots 0x10-0x1f). */
  mounts: 16,
} as const;

const FIELDS = new Set([
  'name',
  'persistent',
  'cpus',
  'memory_mb',
  'disk_gb',
  'image',
  'tags',
  'userdata',
  'forwards',
  'mounts',
  'metrics_enabled',
  'from',
  'snapshot',
  'from_pool',
  'egress',
  'egress_secrets',
  'ttl',
  'on_expire',
  'entrypoint',
]);

function intIn(v: unknown, field: string, lo: number, hi: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) {
    throw new InvalidArgumentError(`${field} must be an integer from ${lo} to ${hi}, got ${shown(v)}`);
  }
  return v;
}

function bool(v: unknown, field: string): boolean {
  if (typeof v !== 'boolean') throw new InvalidArgumentError(`${field} must be a boolean, got ${shown(v)}`);
  return v;
}

function str(v: unknown, field: string): string {
  if (typeof v !== 'string') throw new InvalidArgumentError(`${field} must be a string, got ${shown(v)}`);
  return v;
}

function rejectUnknown(obj: Record<string, unknown>, allowed: readonly string[], where: string): void {
  for (const k of Object.keys(obj)) {
    if (!allowed.includes(k)) throw new InvalidArgumentError(`${where}: unknown field "${k}"`);
  }
}

export function parsePortForward(v: unknown, where: string): PortForward {
  if (!isObject(v)) throw new InvalidArgumentError(`${where} must be an object`);
  rejectUnknown(v, ['host_port', 'guest_port', 'proto'], where);
  if (v.guest_port === undefined) throw new InvalidArgumentError(`${where}.guest_port is required`);
  const guest_port = intIn(v.guest_port, `${where}.guest_port`, 1, 65535);
  const host_port = v.host_port === undefined ? 0 : intIn(v.host_port, `${where}.host_port`, 0, 65535);
  if (host_port !== 0 && host_port < 1024) {
    throw new InvalidArgumentError(`${where}.host_port ${host_port} is privileged; use 0 or a port from 1024`);
  }
  const proto = v.proto === undefined ? 'tcp' : str(v.proto, `${where}.proto`);
  if (proto !== 'tcp' && proto !== 'udp') throw new InvalidArgumentError(`${where}.proto must be tcp or udp`);
  return { host_port, guest_port, proto };
}

const MOUNT_TAG_RE = /^[A-Za-z0-9_-]{1,31}$/;

function parseMount(v: unknown, where: string): Mount {
  if (!isObject(v)) throw new InvalidArgumentError(`${where} must be an object`);
  rejectUnknown(v, ['host', 'guest', 'tag', 'readonly'], where);
  const host = str(v.host, `${where}.host`);
  const guest = str(v.guest, `${where}.guest`);
  for (const [k, p] of [
    ['host', host],
    ['guest', guest],
  ] as const) {
    if (!p.startsWith('/')) throw new InvalidArgumentError(`${where}.${k} must be an absolute path`);
    // Commas would reach QEMU's option syntax; quotes, `$`, `\` and control characters the guest's boot shell.
    if (/[\0-\x1f\x7f,]/.test(p))
      throw new InvalidArgumentError(`${where}.${k} must not contain commas or control characters`);
  }
  if (/["'`$\\]/.test(guest))
    throw new InvalidArgumentError(`${where}.guest must not contain quotes, backquotes, $ or \\`);
  if (guest.split('/').includes('..')) throw new InvalidArgumentError(`${where}.guest must not contain ..`);
  const m: Mount = { host, guest };
  if (v.tag !== undefined) {
    const tag = str(v.tag, `${where}.tag`);
    if (!MOUNT_TAG_RE.test(tag)) throw new InvalidArgumentError(`${where}.tag must match ${MOUNT_TAG_RE.source}`);
    m.tag = tag;
  }
  if (v.readonly !== undefined) m.readonly = bool(v.readonly, `${where}.readonly`);
  return m;
}

/**
 * Validates a create body: types, bounds, unknown fields. `undefined`/`null` body means all
 * defaults. Does not check things that need host state (name taken, image present, caps).
 */
export function parseCreateRequest(body: unknown): CreateRequest {
  if (body === undefined || body === null) body = {};
  if (!isObject(body)) throw new InvalidArgumentError('create request body must be a JSON object');
  for (const k of Object.keys(body)) {
    if (!FIELDS.has(k)) throw new InvalidArgumentError(`unknown field "${k}" in create request`);
  }
  const b = body;
  const req: CreateRequest = { persistent: false, tags: {}, forwards: [], mounts: [] };
  if (b.name !== undefined) req.name = assertNewVmName(b.name);
  if (b.persistent !== undefined) req.persistent = bool(b.persistent, 'persistent');
  if (b.cpus !== undefined) req.cpus = intIn(b.cpus, 'cpus', ...LIMITS.cpus);
  if (b.memory_mb !== undefined) req.memory_mb = intIn(b.memory_mb, 'memory_mb', ...LIMITS.memory_mb);
  if (b.disk_gb !== undefined) req.disk_gb = intIn(b.disk_gb, 'disk_gb', ...LIMITS.disk_gb);
  if (b.image !== undefined) {
    const image = str(b.image, 'image');
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(image))
      throw new InvalidArgumentError(`invalid image name ${JSON.stringify(image)}`);
    req.image = image;
  }
  if (b.tags !== undefined) {
    if (!isObject(b.tags)) throw new InvalidArgumentError('tags must be an object of string to string');
    const entries = Object.entries(b.tags);
    if (entries.length > LIMITS.tags) throw new InvalidArgumentError(`tags: at most ${LIMITS.tags} entries`);
    for (const [k, v] of entries) {
      if (!/^[A-Za-z0-9._/-]{1,63}$/.test(k)) throw new InvalidArgumentError(`tags: invalid key ${JSON.stringify(k)}`);
      if (k === '__proto__' || k === 'constructor' || k === 'prototype')
        throw new InvalidArgumentError(`tags: ${k} is not allowed as a key`);
      req.tags[k] = str(v, `tags.${k}`);
      if (req.tags[k].length > LIMITS.tagValue)
        throw new InvalidArgumentError(`tags.${k}: at most ${LIMITS.tagValue} characters, got ${req.tags[k].length}`);
    }
  }
  if (b.userdata !== undefined) {
    const u = str(b.userdata, 'userdata');
    if (Buffer.byteLength(u) > LIMITS.userdataBytes)
      throw new InvalidArgumentError(`userdata: at most ${LIMITS.userdataBytes} bytes`);
    req.userdata = u;
  }
  if (b.forwards !== undefined) {
    if (!Array.isArray(b.forwards)) throw new InvalidArgumentError('forwards must be an array');
    req.forwards = b.forwards.map((f, i) => parsePortForward(f, `forwards[${i}]`));
    const seen = new Set<string>();
    for (const f of req.forwards) {
      if (f.host_port === 0) continue;
      const key = `${f.proto}:${f.host_port}`;
      if (seen.has(key)) throw new InvalidArgumentError(`forwards: host port ${f.host_port}/${f.proto} given twice`);
      seen.add(key);
    }
  }
  if (b.mounts !== undefined) {
    if (!Array.isArray(b.mounts)) throw new InvalidArgumentError('mounts must be an array');
    if (b.mounts.length > LIMITS.mounts)
      throw new InvalidArgumentError(`mounts: at most ${LIMITS.mounts} host folders, got ${b.mounts.length}`);
    req.mounts = b.mounts.map((m, i) => parseMount(m, `mounts[${i}]`));
    const tags = req.mounts.map(mountTag);
    if (new Set(tags).size !== tags.length) throw new InvalidArgumentError('mounts: tags must be unique');
  }
  if (b.metrics_enabled !== undefined) req.metrics_enabled = bool(b.metrics_enabled, 'metrics_enabled');
  if (b.from !== undefined) req.from = assertVmName(b.from);
  if (b.from_pool !== undefined) req.from_pool = bool(b.from_pool, 'from_pool');
  if (b.snapshot !== undefined) {
    if (req.from === undefined) throw new InvalidArgumentError('snapshot needs from: the VM whose snapshot it is');
    req.snapshot = assertSnapshotName(b.snapshot);
  }
  if (b.egress !== undefined) req.egress = parseEgressPolicy(b.egress, 'egress');
  if (b.egress_secrets !== undefined) req.egress_secrets = parseEgressSecretSpecs(b.egress_secrets);
  if (b.ttl !== undefined && b.ttl !== null) req.ttl_ms = parseTtl(b.ttl);
  if (b.on_expire !== undefined) {
    req.on_expire = parseOnExpire(b.on_expire);
    if (req.ttl_ms === undefined) throw new InvalidArgumentError('on_expire needs a ttl');
  }
  if (b.entrypoint !== undefined) req.entrypoint = parseEntrypointChoice(b.entrypoint) ?? true;
  if (req.from !== undefined || req.from_pool) {
    if (req.from !== undefined && req.from_pool) throw new InvalidArgumentError('give from or from_pool, not both');
    // The machine comes from a snapshot: its shape and first boot are the template's (host
    // folders are the clone's own: they are added to it as it wakes).
    for (const k of ['cpus', 'memory_mb', 'disk_gb', 'image', 'userdata', 'entrypoint'] as const) {
      if (b[k] !== undefined) throw new InvalidArgumentError(`${k} cannot be set on a clone: it is the template's`);
    }
  }
  return req;
}

/** A stopped VM's new shape (PATCH /vms/{name}): what is given changes, the rest stays. */
export interface ShapeChange {
  cpus?: number;
  memory_mb?: number;
  disk_gb?: number;
}

const SHAPE_FIELDS = ['cpus', 'memory_mb', 'disk_gb'] as const;

/** The body of PATCH /vms/{name}: one or more of cpus, memory_mb and disk_gb, within a create's limits. */
export function parseShapeChange(body: unknown): ShapeChange {
  if (!body || typeof body !== 'object' || Array.isArray(body))
    throw new InvalidArgumentError('body must be a JSON object of cpus, memory_mb and disk_gb');
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b)) {
    if (!(SHAPE_FIELDS as readonly string[]).includes(k))
      throw new InvalidArgumentError(`unknown field ${k}: a VM's cpus, memory_mb and disk_gb can be changed`);
  }
  const change: ShapeChange = {};
  for (const k of SHAPE_FIELDS) if (b[k] !== undefined) change[k] = intIn(b[k], k, LIMITS[k][0], LIMITS[k][1]);
  if (!Object.keys(change).length) throw new InvalidArgumentError('nothing to change: give cpus, memory_mb or disk_gb');
  return change;
}

/** `wait` query: omitted/empty = auto; legacy true/1 = ssh; false/0 refused. */
export function parseWaitMode(raw: unknown): WaitMode {
  if (raw === undefined || raw === '') return 'auto';
  if (typeof raw !== 'string') throw new InvalidArgumentError('wait must be given once');
  const v = raw.toLowerCase();
  if (v === 'true' || v === '1') return 'ssh';
  if (v === 'false' || v === '0') {
    throw new InvalidArgumentError(
      `wait=${raw} is not supported: a create always waits; use wait=ssh|agent|userdata|bootstrap|auto`,
    );
  }
  if ((WAIT_MODES as readonly string[]).includes(v)) return v as WaitMode;
  throw new InvalidArgumentError(`invalid wait mode "${raw}"; use auto, ssh, agent, userdata or bootstrap`);
}

/** `timeout` query: a duration; omitted means the daemon default. */
export function parseCreateTimeout(raw: unknown): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw !== 'string') throw new InvalidArgumentError('timeout must be given once');
  const ms = parseDuration(raw, 'timeout');
  if (ms <= 0 || ms > 3_600_000) throw new InvalidArgumentError('timeout must be between 1ms and 1h');
  return ms;
}
