import { assertNodeName } from './cluster.js';
import { InvalidArgumentError, InvalidStateError } from './errors.js';
import { clearRuntime, type VmRecord } from './vm.js';

/**
 * Moving a VM between the nodes of a cluster (docs/cluster.md, "Moving a VM"): what may move, what
 * the node that has it offers the node that takes it, and the bounds the taker holds the files to.
 * Pure: the move service decides with these, the HTTP adapters carry them.
 */

/** `POST /vms/{name}/move` `{node}`. */
export function parseMoveRequest(body: unknown): { node: string } {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new InvalidArgumentError('move body must be a JSON object: {"node": "<node>"}');
  const b = body as Record<string, unknown>;
  const extra = Object.keys(b).filter((k) => k !== 'node');
  if (extra.length) throw new InvalidArgumentError(`unknown move field(s): ${extra.join(', ')}; give only node`);
  if (b.node === undefined) throw new InvalidArgumentError('move needs node: the node to move the vm to');
  assertNodeName(b.node);
  return { node: b.node };
}

/**
 * Throws when the VM cannot move as it is: it must be stopped or suspended (a running guest's
 * memory and disk change under a copy), and nothing of it may belong to this host alone.
 */
export function assertMovable(rec: VmRecord): void {
  if (rec.pool) throw new InvalidStateError(`vm ${rec.name} is a warm pool member; pool members do not move`);
  if (rec.deleting) throw new InvalidStateError(`vm ${rec.name} is being deleted`);
  if (rec.status !== 'stopped' && rec.status !== 'suspended')
    throw new InvalidStateError(
      `vm ${rec.name} is ${rec.status}; a vm moves stopped or suspended: shut it down or suspend it first`,
    );
  if (rec.mounts.length)
    throw new InvalidStateError(
      `vm ${rec.name} shares host folders (${rec.mounts.map((m) => m.host).join(', ')}), which are this node's; remove them to move it`,
    );
  if (rec.overlay_ip)
    throw new InvalidStateError(`vm ${rec.name} has an address on this node's overlay network; it cannot move`);
  if (rec.snapshots?.length)
    throw new InvalidStateError(
      `vm ${rec.name} has snapshots (${rec.snapshots.map((s) => s.name).join(', ')}), which stay on this node; delete them to move it`,
    );
}

/** What a drain did with each VM of the node (POST /nodes/{node}/drain). */
export interface DrainResult {
  node: string;
  moved: { name: string; node: string }[];
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
  /** Suspended: the key of the hypervisor that saved its state (Hypervisor.savedStateKey). */
  state_key?: string;
}

/** The largest offer (the record, its userdata included) a node reads before the files. */
export const MAX_OFFER_BYTES = 1024 * 1024;
/** The most files a VM's directory may send. */
export const MAX_MOVE_FILES = 256;
/** A file name in a VM's directory as a move carries it: one plain name, no directory part. */
export const MOVE_FILE_NAME = /^(?!\.{1,2}$)[A-Za-z0-9._-]{1,128}$/;

/**
 * The most bytes a VM's files may hold on the way in: its disk at full size, its memory twice
 * (a saved stream, or a RAM image and its devices) and 256 MiB for its seed, logs and history.
 */
export function moveByteLimit(rec: Pick<VmRecord, 'disk_gb' | 'memory_mb'>): number {
  const MiB = 1024 * 1024;
  return rec.disk_gb * 1024 * MiB + 2 * rec.memory_mb * MiB + 256 * MiB;
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
    typeof r.egress !== 'object'
  )
    throw new InvalidArgumentError('a move offer must carry from, image_digest and the vm record');
  const record = { ...(r as VmRecord) };
  clearRuntime(record);
  return { from: o.from, image_digest: o.image_digest, state_key: o.state_key, record };
}
