import { InvalidArgumentError } from './errors.js';
import type { KeptOutput } from './timeline.js';

/**
 * A named snapshot of one VM (docs/snapshots.md): its disk as it was, and with `memory` its
 * running guest too (memory, devices, processes), to go back to in place with a revert, as
 * Lima's `limactl snapshot` and Multipass's `snapshot`/`restore` do.
 */
export interface VmSnapshot {
  name: string;
  created_at: string;
  /** The guest's memory is in it: a revert resumes the guest as it ran; else a revert leaves the VM stopped. */
  memory: boolean;
  /** The VM's status when it was taken. */
  taken_from: 'running' | 'paused' | 'stopped' | 'suspended' | 'error';
  /** The VM's shape then: a revert gives it back (a saved guest needs the machine it was saved on). */
  cpus: number;
  memory_mb: number;
  disk_gb: number;
  description?: string;
  /**
   * Its processes' bytes when it was taken (of a running guest), which a revert's timeline keeps
   * (domain/timeline.ts). The daemon's own: not in the API's answers (publicSnapshot).
   */
  kept_output?: KeptOutput;
  /** The VM's timeline when it was taken (none: the first): what a revert to it shares `kept_output` with. */
  timeline?: string;
}

/** A snapshot as the API shows it. */
export function publicSnapshot(s: VmSnapshot): VmSnapshot {
  const { kept_output: _k, timeline: _t, ...pub } = s;
  return pub;
}

/** What POST /vms/{name}/snapshots takes. */
export interface SnapshotRequest {
  name?: string;
  description?: string;
}

export const SNAPSHOT_NAME_RE = /^[a-z0-9][a-z0-9._-]{0,62}$/;
/** The most snapshots one VM keeps: each holds its disk's changes since the one before, and its memory. */
export const MAX_SNAPSHOTS = 32;
const MAX_DESCRIPTION = 512;

export function assertSnapshotName(name: unknown): string {
  if (typeof name !== 'string' || !SNAPSHOT_NAME_RE.test(name))
    throw new InvalidArgumentError(
      `invalid snapshot name ${JSON.stringify(name)}: use 1-63 characters a-z, 0-9, '.', '_' and '-', starting with a letter or digit`,
    );
  return name;
}

export function parseSnapshotRequest(body: unknown): SnapshotRequest {
  if (body === undefined || body === null) return {};
  if (typeof body !== 'object' || Array.isArray(body))
    throw new InvalidArgumentError('body must be a JSON object: {name?, description?}');
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b))
    if (k !== 'name' && k !== 'description')
      throw new InvalidArgumentError(`unknown field ${k}: a snapshot takes name and description`);
  const out: SnapshotRequest = {};
  if (b.name !== undefined) out.name = assertSnapshotName(b.name);
  if (b.description !== undefined) {
    if (
      typeof b.description !== 'string' ||
      b.description.length > MAX_DESCRIPTION ||
      /[\0-\x08\x0b-\x1f]/.test(b.description)
    )
      throw new InvalidArgumentError(`description must be text of at most ${MAX_DESCRIPTION} characters`);
    out.description = b.description;
  }
  return out;
}

/** The name an unnamed snapshot gets: `snap-N`, one more than the highest N in use. */
export function nextSnapshotName(existing: readonly VmSnapshot[]): string {
  let max = 0;
  for (const s of existing) {
    const m = /^snap-(\d{1,9})$/.exec(s.name);
    if (m) max = Math.max(max, Number(m[1]));
  }
  return `snap-${max + 1}`;
}

/** How a create from a named snapshot names it to VmDisks.clone, where a fork names its capture. */
export const SNAPSHOT_SOURCE = 'snapshot:';
export const snapshotSource = (name: string) => `${SNAPSHOT_SOURCE}${name}`;
/** The snapshot a clone source names, or undefined for a fork's capture. */
export function snapshotOfSource(source: string | undefined): string | undefined {
  return source?.startsWith(SNAPSHOT_SOURCE) ? source.slice(SNAPSHOT_SOURCE.length) : undefined;
}
