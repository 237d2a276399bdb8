import { existsSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { InternalError } from '../../domain/errors.js';
import type { ImageBundle } from '../../domain/image-fetch.js';
import { digestOf, hashImage, type HashedFile } from './image-digest.js';

/** What a manifest says an image boots from. */
interface BootNames {
  disk: string;
  kernel?: string;
  initrd?: string;
  boot?: 'kernel' | 'firmware';
}

/** The files an image boots from (its digest's): disk, and kernel and initrd unless it boots by firmware. */
function bootFiles(dir: string, m: BootNames): string[] {
  return [m.disk, ...(m.boot === 'firmware' ? [] : [m.kernel, m.initrd])].filter(
    (f): f is string => typeof f === 'string' && /^[A-Za-z0-9._-]+$/.test(f) && existsSync(join(dir, f)),
  );
}

/** The content digest of the image in `dir`: of its disk, kernel and initrd (image-digest.ts). */
export async function imageDigest(dir: string, m: BootNames): Promise<string> {
  return (await hashImage(dir, bootFiles(dir, m))).digest;
}

/** The image `id` in `dir` as another node fetches it: its manifest and what it boots from, hashed. */
export async function bundleOf(
  dir: string,
  id: string,
  m: BootNames,
): Promise<ImageBundle & { paths: Record<string, string> }> {
  const { files } = await hashImage(dir, ['manifest.json', ...bootFiles(dir, m)]);
  // The digest is the boot files' (what `imageDigest` says), from the same hashes.
  const digest = digestOf(files.slice(1));
  return { id, digest, files, paths: Object.fromEntries(files.map((f) => [f.name, join(dir, f.name)])) };
}

/**
 * Checks what a fetch wrote into `stage` against what was offered: every file's sha256, then the
 * digest of the boot files its manifest names. Anything wrong removes `stage` and throws
 * InternalError; nothing is then installed.
 */
export async function checkBundle(stage: string, bundle: ImageBundle): Promise<void> {
  const drop = async (why: string) => {
    await rm(stage, { recursive: true, force: true });
    return new InternalError(`image ${bundle.id} as fetched ${why}; nothing was installed`);
  };
  // A file missing is a file that does not match.
  const got = await hashImage(
    stage,
    bundle.files.map((f) => f.name),
  ).catch(() => ({ files: [] as HashedFile[] }));
  const wrong = bundle.files.find((f, i) => got.files[i]?.sha256 !== f.sha256);
  if (wrong) throw await drop(`does not match the sha256 of ${wrong.name}`);
  let m: BootNames;
  try {
    m = JSON.parse(await readFile(join(stage, 'manifest.json'), 'utf8')) as BootNames;
  } catch {
    throw await drop('has no readable manifest.json');
  }
  // The boot files the manifest names, by the hashes just checked: one not offered has none.
  const boot = bootFiles(stage, m).map((name) => got.files.find((f) => f.name === name) ?? { name, sha256: '' });
  if (digestOf(boot) !== bundle.digest) throw await drop(`does not have the digest ${bundle.digest}`);
}
