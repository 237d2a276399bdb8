import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import type { ImageManifest } from './image-manifest.js';

/**
 * The builds of a built-in image that VMs still stand on after it was built anew (docs/image.md,
 * "After an upgrade of svc"). A VM's disk is an overlay that names its image's disk by path, and a
 * VM boots the kernel and initramfs of the build its disk was made from (a kernel's modules live
 * on the disk), so a new build cannot replace the files of one that VMs use. It goes in beside
 * them instead, under names of its own (`build-<stamp>-disk.qcow2`), and becomes the image's
 * manifest; the manifest it replaces is kept in `older-builds/<stamp>.json`, its files where
 * they were. A VM launches with the build its disk stands on; an older build goes once no VM
 * stands on it.
 */
export const OLDER_BUILDS = 'older-builds';
const BUILD_FILE = /^build-[0-9a-z]+-/;

/** The files a manifest names in its folder. */
export function filesOf(m: ImageManifest): string[] {
  return [m.disk, m.kernel, m.initrd].filter((f): f is string => typeof f === 'string' && f !== '');
}

/**
 * The files kept in `dir`'s `older-builds/`, each with the older build it describes: none for one
 * cut short by a crash, or for a copy of `current` (what a crash in addBuild leaves).
 */
function keptBuilds(dir: string, current: ImageManifest): { file: string; m?: ImageManifest }[] {
  const kept = join(dir, OLDER_BUILDS);
  if (!existsSync(kept)) return [];
  return readdirSync(kept)
    .sort()
    .map((file) => {
      try {
        const m = JSON.parse(readFileSync(join(kept, file), 'utf8')) as ImageManifest;
        return file.endsWith('.json') && m.disk !== current.disk ? { file, m } : { file };
      } catch {
        return { file };
      }
    });
}

/** The manifests of the older builds kept in `dir` beside `current` (none when there are none). */
export function olderBuilds(dir: string, current: ImageManifest): ImageManifest[] {
  return keptBuilds(dir, current).flatMap((b) => (b.m ? [b.m] : []));
}

/** The build of the image in `dir` whose disk is `disk` (a path in `dir`): the current one, or a kept older one. */
export function buildWithDisk(dir: string, current: ImageManifest, disk: string): ImageManifest {
  const name = basename(disk);
  if (name === current.disk) return current;
  return olderBuilds(dir, current).find((m) => m.disk === name) ?? current;
}

/**
 * Makes the complete build in `stage` (its files and manifest.json) the image's current build in
 * `dir`, keeping `current`'s files and manifest as an older build. Its files are moved in first
 * under new names, then its manifest replaces the old one in one rename: a crash between leaves
 * the old build current and the moved files for `dropOlderBuilds`.
 */
export async function addBuild(dir: string, stage: string, current: ImageManifest): Promise<void> {
  const stamp = Date.now().toString(36);
  const next = JSON.parse(await readFile(join(stage, 'manifest.json'), 'utf8')) as ImageManifest;
  await mkdir(join(dir, OLDER_BUILDS), { recursive: true });
  await writeFileAtomic(join(dir, OLDER_BUILDS, `${stamp}.json`), JSON.stringify(current, null, 2) + '\n');
  const named = { ...next };
  for (const key of ['disk', 'kernel', 'initrd'] as const) {
    const f = next[key];
    if (!f) continue;
    named[key] = `build-${stamp}-${f}`;
    await rename(join(stage, f), join(dir, named[key]));
  }
  await writeFileAtomic(join(dir, 'manifest.json'), JSON.stringify(named, null, 2) + '\n');
  await rm(stage, { recursive: true, force: true });
}

/**
 * Removes the older builds kept in `dir` whose disks are not in `used` (the image's disk files
 * that VMs stand on): the files they name that no build kept names, the moved-in files of a build
 * cut short, and their manifests. Returns the files removed.
 */
export async function dropOlderBuilds(dir: string, current: ImageManifest, used: Set<string>): Promise<string[]> {
  const kept = join(dir, OLDER_BUILDS);
  const all = keptBuilds(dir, current);
  const stays = (b: { m?: ImageManifest }) => !!b.m && used.has(b.m.disk);
  const keep = new Set([current, ...all.filter(stays).map((b) => b.m!)].flatMap(filesOf));
  const named = new Set(all.flatMap((b) => (b.m ? filesOf(b.m) : [])));
  const gone: string[] = [];
  for (const f of await readdir(dir)) {
    if (keep.has(f) || !(named.has(f) || BUILD_FILE.test(f))) continue;
    await rm(join(dir, f), { force: true });
    gone.push(f);
  }
  for (const b of all) if (!stays(b)) await rm(join(kept, b.file), { force: true });
  if (!all.some(stays)) await rm(kept, { recursive: true, force: true });
  return gone;
}
