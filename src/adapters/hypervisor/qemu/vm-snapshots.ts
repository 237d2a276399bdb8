import { chmod, mkdir, readFile, readdir, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFileAtomic } from '../../fs-kit/atomic-file.js';
import { exists } from '../../fs-kit/exists.js';
import { chainFrom, LAYER, layersOf, linkOrCopy, overlay, rebaseOnto, shareInto, type Frozen } from './disk-layers.js';
import { clearSaved, savedFiles, SHARED_STATE, writeSaved, type Saved } from './saved-state.js';

/**
 * A VM's named snapshots (docs/snapshots.md), each a folder `snapshots/<name>/` of its VM's
 * directory: hard links to the frozen layers its disk stood on (top first, as a clone's are:
 * disk-layers.ts) and to the saved state of its memory when it has one, and `snapshot.json`
 * naming the top. Layers and states are never written again, so a snapshot costs the disk's
 * changes since the layer below and its memory; the VM, its clones and its other snapshots share
 * the rest. A folder is whole or absent: it is filled under a temporary name, then renamed.
 */
const SNAPSHOTS = 'snapshots';
const TOP = 'snapshot.json';
const DISK = 'disk.qcow2';
const IMAGE_BASE = /^base-[0-9a-f]{16}$/;

const folderOf = (dir: string, name: string) => join(dir, SNAPSHOTS, name);

/** Links `name` from `from` into `to` unless `to` has it (layers and states are never rewritten: same name, same bytes). */
async function linkIn(from: string, to: string, name: string): Promise<void> {
  if (!(await exists(join(to, name)))) await linkOrCopy(join(from, name), join(to, name));
}

/** Keeps `top` (a layer of the VM in `dir` and the saved state beside it) as the snapshot `name`. */
export async function keepSnapshot(dir: string, name: string, top: Frozen): Promise<void> {
  const root = join(dir, SNAPSHOTS);
  await mkdir(root, { recursive: true, mode: 0o700 });
  const tmp = join(root, `.${name}.tmp`);
  // What a call that did not finish left under the name (the record never named it).
  await rm(tmp, { recursive: true, force: true });
  await rm(folderOf(dir, name), { recursive: true, force: true });
  await mkdir(tmp, { mode: 0o700 });
  try {
    for (const layer of await chainFrom(dir, top.layer)) await linkOrCopy(join(dir, layer), join(tmp, layer));
    for (const f of savedFiles(top.state)) await linkOrCopy(join(dir, f), join(tmp, f));
    await writeFile(join(tmp, TOP), JSON.stringify(top) + '\n');
    await rename(tmp, folderOf(dir, name));
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    throw err;
  }
}

/** The top a snapshot folder names, checked: only names of ours, in that folder. */
async function topOf(folder: string): Promise<Frozen> {
  const text = await readFile(join(folder, TOP), 'utf8');
  const top = JSON.parse(text) as { layer?: unknown; state?: { kind?: unknown; file?: unknown; base?: unknown } };
  if (typeof top.layer !== 'string' || !LAYER.test(top.layer)) throw new Error(`${folder}: no layer in ${TOP}`);
  let state: Saved | undefined;
  if (top.state?.kind === 'stream' && typeof top.state.file === 'string' && SHARED_STATE.test(top.state.file))
    state = { kind: 'stream', file: top.state.file };
  else if (top.state?.kind === 'image' && typeof top.state.base === 'string' && IMAGE_BASE.test(top.state.base))
    state = { kind: 'image', base: top.state.base };
  else if (top.state !== undefined) throw new Error(`${folder}: an unknown saved state in ${TOP}`);
  return { layer: top.layer, state };
}

/**
 * Puts the stopped VM in `dir` back to the snapshot `name`: its links to the snapshot's layers, a
 * new empty disk on its top swapped in by a rename, then the snapshot's saved state and marker.
 * A daemon that dies in it leaves a VM whose disk is the old one or the snapshot's, with no saved
 * state or the snapshot's. Its links to layers its disk no longer stands on go after (its clones,
 * forks and snapshots keep their own).
 */
export async function revertTo(dir: string, name: string): Promise<{ memory: boolean }> {
  const folder = folderOf(dir, name);
  const top = await topOf(folder);
  for (const layer of await chainFrom(folder, top.layer)) await linkIn(folder, dir, layer);
  await overlay(dir, `${DISK}.new`, top.layer);
  await clearSaved(dir);
  await rename(join(dir, `${DISK}.new`), join(dir, DISK));
  if (top.state) {
    for (const f of savedFiles(top.state)) await linkIn(folder, dir, f);
    await writeSaved(dir, top.state);
  }
  const kept = new Set(await layersOf(dir));
  for (const f of await readdir(dir)) if (LAYER.test(f) && !kept.has(f)) await rm(join(dir, f), { force: true });
  return { memory: !!top.state };
}

/** Gives a new VM in `to` the snapshot `name` of the VM in `dir`, as a clone is given its template's top. */
export async function shareSnapshot(
  dir: string,
  name: string,
  to: string,
): Promise<{ snapshot: boolean; state?: Saved }> {
  const folder = folderOf(dir, name);
  const top = await topOf(folder);
  return { ...(await shareInto(folder, to, top)), state: top.state };
}

/** A note in a snapshot's folder: a new VM was made from it before (the next makes its RAM image). */
const SHARED_ONCE = '.shared-once';

/** Was a new VM made from the snapshot `name` before? Notes that one is now. */
export async function sharedBefore(dir: string, name: string): Promise<boolean> {
  const note = join(folderOf(dir, name), SHARED_ONCE);
  if (await exists(note)) return true;
  await writeFile(note, '');
  return false;
}

/**
 * Puts `next`, a saved state in `from` made of the snapshot's own (a RAM image made of its
 * stream), in the snapshot `name` in its place: its files linked in, `snapshot.json` rewritten in
 * one step, then the old state's files dropped. A daemon that dies in it leaves the snapshot with
 * one state or the other, and at worst a file it no longer names.
 */
export async function replaceSnapshotState(dir: string, name: string, from: string, next: Saved): Promise<void> {
  const folder = folderOf(dir, name);
  const top = await topOf(folder);
  for (const f of savedFiles(next)) {
    // Read-only, as a template's: every guest that restores from it maps it privately.
    await chmod(join(from, f), 0o444);
    await rm(join(folder, f), { force: true });
    await linkOrCopy(join(from, f), join(folder, f));
  }
  await writeFileAtomic(join(folder, TOP), JSON.stringify({ layer: top.layer, state: next }) + '\n');
  for (const f of savedFiles(top.state)) if (!savedFiles(next).includes(f)) await rm(join(folder, f), { force: true });
}

/** Forgets the snapshot `name` of the VM in `dir` (and the folder of snapshots once empty). Idempotent. */
export async function dropSnapshot(dir: string, name: string): Promise<void> {
  await rm(folderOf(dir, name), { recursive: true, force: true });
  await rmdir(join(dir, SNAPSHOTS)).catch(() => undefined);
}

/**
 * Makes the snapshots of the VM in `dir` (a VM from another node: a move) stand on `image`, this
 * node's copy of its image, as restandOn does its disk: the bottom layer of each one's chain. A
 * layer the disk or another snapshot also stands on is one file (a link), given the same name.
 */
export async function restandSnapshots(dir: string, image: string): Promise<void> {
  const names = await readdir(join(dir, SNAPSHOTS)).catch(() => [] as string[]);
  for (const name of names) {
    if (name.startsWith('.')) continue;
    const folder = folderOf(dir, name);
    const chain = await chainFrom(folder, (await topOf(folder)).layer);
    if (chain.length) await rebaseOnto(join(folder, chain[chain.length - 1]), image);
  }
}

/** Forgets every snapshot of the VM in `dir` (its destroy). */
export async function dropSnapshots(dir: string): Promise<void> {
  await rm(join(dir, SNAPSHOTS), { recursive: true, force: true });
}
