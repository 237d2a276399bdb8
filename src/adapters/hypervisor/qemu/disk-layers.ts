import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, copyFile, link, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { childEnv } from '../../process-kit/child-env.js';
import { backingName } from '../../images/qcow2-backing.js';
import { savedFiles, writeSaved, type Saved } from './saved-state.js';

const run = promisify(execFile);

/** A frozen layer's file name; the `.state` beside it is the saved state that goes with it. */
export const LAYER = /^base-[0-9a-f]{16}\.qcow2$/;
const DISK = 'disk.qcow2';
/**
 * The most layers a template stands on. A template that is cloned, run, changed and cloned again
 * gains a layer each time; past this, its next freeze writes the whole chain (above the image) into
 * one new layer instead, so reads never walk a long chain. Clones keep the chains they have.
 */
export const MAX_LAYERS = 8;
/** The range config `qemu.max_disk_layers` may set (docs/config.md). */
export const LAYERS_RANGE = [2, 64] as const;
/** What the last freeze left: the layer and the disk it put on top, to know whether it still holds. */
const NOTE = 'layer.json';

interface Note {
  layer: string;
  /** The saved state's files, space-separated (a stream's one, a RAM image's two). */
  state?: string;
  ino: number;
  mtimeMs: number;
  size: number;
}

/** The top of a frozen template: the layer clones stand on and the saved state they load. */
export interface Frozen {
  layer: string;
  state?: Saved;
}

/** The frozen layers, in `dir`, that `dir`'s disk stands on (top first); the image's disk is not one. */
export async function layersOf(dir: string): Promise<string[]> {
  return chainFrom(dir, await backingName(join(dir, DISK)));
}

/** The frozen layers in `dir` from `first` down (first included); the image's disk is not one. */
export async function chainFrom(dir: string, first: string | undefined): Promise<string[]> {
  const out: string[] = [];
  let next = first;
  while (next && LAYER.test(next) && !out.includes(next)) {
    out.push(next);
    next = await backingName(join(dir, next));
  }
  return out;
}

/**
 * Makes the disk in `dir` (a VM's from another node: a move) stand on `image`, this node's copy of
 * its image: the bottom of its chain (its last layer, or the disk itself) is given that backing
 * name without touching the data (`qemu-img rebase -u`: the caller checked the images' digests
 * agree). Its layers are its own copies here, so changing one changes no other VM's.
 */
export async function restandOn(dir: string, image: string): Promise<void> {
  const chain = await layersOf(dir);
  await rebaseOnto(join(dir, chain.length ? chain[chain.length - 1] : DISK), image);
}

/**
 * Why the qcow2 `file` and the chain it stands on do not open (qemu-img's words: a backing file
 * gone, say), or undefined when they do. Shares the lock of a QEMU that has it open (`-U`).
 */
export async function chainFault(file: string): Promise<string | undefined> {
  try {
    await run('qemu-img', ['info', '-U', '--backing-chain', '-f', 'qcow2', file], { env: childEnv() });
    return undefined;
  } catch (err) {
    const said = (err as { stderr?: string }).stderr?.trim();
    // qemu-img says a missing backing file's name twice ("Could not open 'X': Could not open 'X': ...").
    return (said || (err as Error).message)
      .split('\n')[0]
      .replace(/^qemu-img: /, '')
      .replace(/(Could not open '[^']*': )\1+/g, '$1');
  }
}

/** Gives the qcow2 `file` the backing `image` without touching its data (`qemu-img rebase -u`). */
export async function rebaseOnto(file: string, image: string): Promise<void> {
  const mode = (await stat(file)).mode & 0o777;
  await chmod(file, mode | 0o200);
  try {
    await run('qemu-img', ['rebase', '-q', '-u', '-f', 'qcow2', '-b', image, '-F', 'qcow2', file], {
      env: childEnv(),
    });
  } finally {
    await chmod(file, mode);
  }
}

export async function overlay(dir: string, file: string, backing: string): Promise<void> {
  // A relative backing name: it resolves beside the overlay, so a renamed VM directory keeps it.
  await run('qemu-img', ['create', '-q', '-f', 'qcow2', '-b', backing, '-F', 'qcow2', join(dir, file)], {
    env: childEnv(),
  });
}

/** A hard link, or a copy across filesystems. */
export async function linkOrCopy(from: string, to: string): Promise<void> {
  try {
    await link(from, to);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
    await copyFile(from, to);
  }
}

/**
 * Makes the stopped template's disk (and its saved state, when suspended) a frozen layer that
 * clones can stand on, and puts the template on a thin overlay over it. A template frozen before
 * and untouched since is not frozen again (its disk is the overlay the last freeze made).
 * Every step leaves something that starts: the disk and its layer are one file until the rename.
 */
export async function freeze(dir: string, saved: Saved | undefined, maxLayers = MAX_LAYERS): Promise<Frozen> {
  const disk = join(dir, DISK);
  const now = await stat(disk);
  const note = JSON.parse(await readFile(join(dir, NOTE), 'utf8').catch(() => 'null')) as Note | null;
  const state = saved?.kind === 'stream' || saved?.kind === 'image' ? saved : undefined;
  const files = savedFiles(state);
  if (
    note &&
    note.ino === now.ino &&
    note.mtimeMs === now.mtimeMs &&
    note.size === now.size &&
    note.state === (files.join(' ') || undefined)
  )
    return { layer: note.layer, state };
  const id = randomBytes(8).toString('hex');
  const layer = `base-${id}.qcow2`;
  const chain = await layersOf(dir);
  const flat = chain.length >= maxLayers;
  if (flat) await flatten(dir, chain, layer);
  else await link(disk, join(dir, layer));
  const shared: Saved | undefined =
    state?.kind === 'stream'
      ? { kind: 'stream', file: `base-${id}.state` }
      : state
        ? { kind: 'image', base: `base-${id}` }
        : undefined;
  const sharedFiles = savedFiles(shared);
  for (const [i, f] of files.entries()) await link(join(dir, f), join(dir, sharedFiles[i]));
  await overlay(dir, `${DISK}.new`, layer);
  if (shared) await writeSaved(dir, shared);
  await rename(join(dir, `${DISK}.new`), disk);
  // The VM's own saved state now lives on as the shared one (links to shared ones stay while a clone links them).
  for (const f of files) if (!sharedFiles.includes(f)) await rm(join(dir, f), { force: true });
  // After a flatten the template no longer stands on the old layers: its links to them go (the
  // files stay while a clone links them).
  if (flat) for (const old of chain) await rm(join(dir, old), { force: true });
  // No VM writes a layer again (QEMU opens backing files read-only).
  await chmod(join(dir, layer), 0o444);
  for (const f of sharedFiles) await chmod(join(dir, f), 0o444);
  await writeNote(dir, { layer, state: shared });
  return { layer, state: shared };
}

/** Records what the last freeze left, against the disk as it is now. */
async function writeNote(dir: string, top: Frozen): Promise<void> {
  const now = await stat(join(dir, DISK));
  const next: Note = {
    layer: top.layer,
    state: savedFiles(top.state).join(' ') || undefined,
    ino: now.ino,
    mtimeMs: now.mtimeMs,
    size: now.size,
  };
  await writeFile(join(dir, `${NOTE}.tmp`), JSON.stringify(next));
  await rename(join(dir, `${NOTE}.tmp`), join(dir, NOTE));
}

/**
 * Puts another saved state in the place of a frozen template's (its RAM image, made from the
 * stream it froze): the files are in `dir` already; the marker and the note move to them and the
 * template's link to the old state goes (clones that link it keep it).
 */
export async function replaceState(dir: string, top: Frozen, next: Saved): Promise<Frozen> {
  for (const f of savedFiles(next)) await chmod(join(dir, f), 0o444);
  await writeSaved(dir, next);
  const frozen = { layer: top.layer, state: next };
  await writeNote(dir, frozen);
  for (const f of savedFiles(top.state)) if (!savedFiles(next).includes(f)) await rm(join(dir, f), { force: true });
  return frozen;
}

/**
 * Writes what the disk shows through its whole chain of layers, minus what the image under the
 * chain already holds, into one new layer on that image: a copy of the top overlay rebased onto
 * the image (qemu-img rebase in its safe mode writes every cluster where the two differ). The saved
 * state goes with it unchanged: the guest sees the same bytes.
 */
async function flatten(dir: string, chain: string[], layer: string): Promise<void> {
  const image = await backingName(join(dir, chain[chain.length - 1]));
  const tmp = join(dir, `${layer}.tmp`);
  try {
    await copyFile(join(dir, DISK), tmp);
    await run(
      'qemu-img',
      ['rebase', '-q', '-f', 'qcow2', ...(image ? ['-b', image, '-F', 'qcow2'] : ['-b', '']), tmp],
      { env: childEnv() },
    );
    await rename(tmp, join(dir, layer));
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

/**
 * Gives the clone in `to` its own links to every layer of the template in `from` under `top` and a thin
 * overlay on the top one; with a saved state, a link to it and a marker. A layer's file lives
 * as long as one VM directory links it, so a template can go while its clones live on.
 */
export async function shareInto(from: string, to: string, top: Frozen): Promise<{ snapshot: boolean }> {
  // What the new overlay stands on: the top and the layers under it (a VM captured since stands on more).
  for (const name of await chainFrom(from, top.layer)) await linkOrCopy(join(from, name), join(to, name));
  await overlay(to, DISK, top.layer);
  if (!top.state) return { snapshot: false };
  for (const f of savedFiles(top.state)) await linkOrCopy(join(from, f), join(to, f));
  await writeSaved(to, top.state);
  return { snapshot: true };
}
