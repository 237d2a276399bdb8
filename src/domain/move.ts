import { assertNodeName } from './cluster.js';
import { InvalidArgumentError, InvalidStateError } from './errors.js';
import { MAX_SNAPSHOTS, type VmSnapshot } from './snapshots.js';
import { clearRuntime, type VmRecord } from './vm.js';
import { isTimelineId, offeredKept, offeredTimeline } from './timeline.js';

/**
 * Moving a VM between the nodes of a cluster (docs/cluster.md, "Moving a VM"): what may move, what
 * the node that has it offers the node that takes it, and the bounds the taker holds the files to.
 * Pure: the move service decides with these, the HTTP adapters carry them.
 */

/** `POST /vms/{name}/move` `{node?}`: without a node (or a body), the placement rule picks one of the others. */
export function parseMoveRequest(body: unknown): { node?: string } {
  if (body === undefined) return {};
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new InvalidArgumentError('move body must be a JSON object: {"node": "<node>"}, or {} for any other node');
  const b = body as Record<string, unknown>;
  const extra = Object.keys(b).filter((k) => k !== 'node');
  if (extra.length) throw new InvalidArgumentError(`unknown move field(s): ${extra.join(', ')}; give only node`);
  if (b.node === undefined) return {};
  assertNodeName(b.node);
  return { node: b.node };
}

/**
 * Throws when the VM cannot move as it is. A stopped or suspended VM is carried as it is; with
 * `running`, a running or paused one may move too (its node suspends it for the move and the taking
 * node restores it, and pauses a paused one again: a running guest's memory and disk change under a
 * copy). Nothing of it may belong to this host alone.
 */
export function assertMovable(rec: VmRecord, o: { running?: boolean } = {}): void {
  if (rec.pool) throw new InvalidStateError(`vm ${rec.name} is a warm pool member; pool members do not move`);
  if (rec.deleting) throw new InvalidStateError(`vm ${rec.name} is being deleted`);
  const carried = rec.status === 'stopped' || rec.status === 'suspended';
  const live = rec.status === 'running' || rec.status === 'paused';
  if (!carried && !(o.running && live))
    throw new InvalidStateError(
      o.running
        ? `vm ${rec.name} is ${rec.status}; a vm moves running or paused (suspended for the move, restored there), stopped or suspended`
        : `vm ${rec.name} is ${rec.status}; a vm is carried stopped or suspended`,
    );
  if (live && !rec.persistent)
    throw new InvalidStateError(
      `vm ${rec.name} is ephemeral: it cannot be suspended for a move, and is removed when stopped; it stays`,
    );
  if (rec.mounts.length)
    throw new InvalidStateError(
      `vm ${rec.name} shares host folders (${rec.mounts.map((m) => m.host).join(', ')}), which are this node's; remove them to move it`,
    );
  if (rec.overlay_ip)
    throw new InvalidStateError(`vm ${rec.name} has an address on this node's overlay network; it cannot move`);
}

/** What a drain did with each VM of the node (POST /nodes/{node}/drain). */
export interface DrainResult {
  node: string;
  /** `warning`: a running or paused VM that moved but was not restored there (it is suspended there) or not paused again (it runs there). */
  moved: { name: string; node: string; warning?: string }[];
  refused: { name: string; reason: string }[];
}

/** What the node that has a VM sends the node that takes it, before the VM's files. */
export interface MoveOffer {
  /** The node that has the VM now. */
  from: string;
  /** The VM's record, without what only its node's hypervisor reads (`runtime`). */
  record: VmRecord;
  /** The content digest of its image on the sending node: the disk stands on those bytes. */
  image_digest: string;
  /** Suspended, or with snapshots that hold memory: the key of the hypervisor that saved them (Hypervisor.savedStateKey). */
  state_key?: string;
}

/** The largest offer (the record, its userdata included) a node reads before the files. */
export const MAX_OFFER_BYTES = 1024 * 1024;
/** The most files a VM's directory may send. */
export const MAX_MOVE_FILES = 256;
/** The most hard links (a second name of a file sent before: a disk layer its snapshots share). */
export const MAX_MOVE_LINKS = 4096;
/** A file name in a VM's directory as a move carries it: one plain name, no directory part. */
export const MOVE_FILE_NAME = /^(?!\.{1,2}$)[A-Za-z0-9._-]{1,128}$/;
/** The folder of a VM's directory that holds its named snapshots (any hypervisor's), which move with it. */
export const SNAPSHOTS_FOLDER = 'snapshots';

/**
 * Is `path` one a move carries: a plain name in the VM's directory, or one in its snapshots
 * folder, at most two folders down (`snapshots/NAME/FILE`)? Every part a plain name.
 */
export function isMovePath(path: string): boolean {
  const parts = path.split('/');
  if (parts.length === 1) return MOVE_FILE_NAME.test(path);
  return parts.length <= 3 && parts[0] === SNAPSHOTS_FOLDER && parts.slice(1).every((p) => MOVE_FILE_NAME.test(p));
}

/**
 * The most bytes a VM's files may hold on the way in: its disk at full size, its memory twice
 * (a saved stream, or a RAM image and its devices) and 256 MiB for its seed, logs and history;
 * and each of its snapshots' disk and memory as they were taken (docs/snapshots.md).
 */
export function moveByteLimit(rec: Pick<VmRecord, 'disk_gb' | 'memory_mb' | 'snapshots'>): number {
  const MiB = 1024 * 1024;
  const held = (s: { disk_gb: number; memory_mb: number }) => s.disk_gb * 1024 * MiB + 2 * s.memory_mb * MiB;
  return held(rec) + 256 * MiB + (rec.snapshots ?? []).reduce((sum, s) => sum + held(s), 0);
}

/** The offer's record as the taking node keeps it: checked to be a record at all, its runtime dropped. */
export function offeredRecord(offer: unknown): MoveOffer {
  const o = offer as Partial<MoveOffer> | null;
  const r = o?.record as Partial<VmRecord> | undefined;
  if (
    !o ||
    typeof o.from !== 'string' ||
    typeof o.image_digest !== 'string' ||
    (o.state_key !== undefined && typeof o.state_key !== 'string') ||
    !r ||
    typeof r.name !== 'string' ||
    typeof r.image !== 'string' ||
    typeof r.cpus !== 'number' ||
    typeof r.memory_mb !== 'number' ||
    typeof r.disk_gb !== 'number' ||
    !Array.isArray(r.mounts) ||
    !Array.isArray(r.forwards) ||
    typeof r.egress !== 'object' ||
    !snapshotsOk(r.snapshots)
  )
    throw new InvalidArgumentError('a move offer must carry from, image_digest and the vm record');
  const record = { ...(r as VmRecord) };
  clearRuntime(record);
  // What only readers' offsets lean on is kept when well formed, else dropped: they read again.
  const timeline = offeredTimeline(r.timeline);
  if (timeline) record.timeline = timeline;
  else delete record.timeline;
  // Bytes noted at a suspend are on the record's timeline: not kept when it was not.
  const saved = offeredKept(r.saved_output);
  if (saved && (timeline || r.timeline === undefined)) record.saved_output = saved;
  else delete record.saved_output;
  if (record.snapshots)
    record.snapshots = record.snapshots.map(({ kept_output, timeline, ...s }) => {
      const kept = offeredKept(kept_output);
      const on = typeof timeline === 'string' && isTimelineId(timeline) ? timeline : undefined;
      // Bytes without the timeline they were noted on would be shared with the first: not kept.
      return kept && (on || timeline === undefined) ? { ...s, kept_output: kept, ...(on ? { timeline: on } : {}) } : s;
    });
  return { from: o.from, image_digest: o.image_digest, state_key: o.state_key, record };
}

/** The snapshots a record lists, as many as a VM may keep, each with a shape (the byte limit counts them). */
function snapshotsOk(list: unknown): boolean {
  if (list === undefined) return true;
  const whole = (n: unknown) => Number.isSafeInteger(n) && (n as number) > 0;
  return (
    Array.isArray(list) &&
    list.length <= MAX_SNAPSHOTS &&
    list.every((s: Partial<VmSnapshot> | null) => !!s && whole(s.disk_gb) && whole(s.memory_mb) && whole(s.cpus))
  );
}
