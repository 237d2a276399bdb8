import { createReadStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createGunzip } from 'node:zlib';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import tar from 'tar-stream';
import { formatBytes } from '../../domain/bytes.js';
import { ENTRYPOINT_TAG, type ProcessStart } from '../../domain/processes.js';
import { InvalidArgumentError } from '../../domain/errors.js';
import { fileHead } from '../fs-kit/file-head.js';
import type { Room } from '../fs-kit/free-room.js';
import { shellWord } from '../process-kit/shell-word.js';

/** The part of an OCI image config svc uses: what `docker run` would start the container with. */
export interface OciImageConfig {
  Env?: string[];
  WorkingDir?: string;
  User?: string;
  Entrypoint?: string[];
  Cmd?: string[];
}

export interface OciImage {
  os: string;
  architecture: string;
  config: OciImageConfig;
  /** Layer blobs (tar, plain or gzip), bottom first. */
  layers: string[];
}

const MAX_JSON = 4 << 20;
export const MAX_LAYERS = 128;
const MAX_ENTRIES = 2_000_000;
/** The most an imported image's layers may hold, file data summed over every layer. */
export const UNPACKED_CAP: Room = { bytes: 64 * 2 ** 30, why: "svc's cap on an imported image" };
const DIGEST = /^sha256:[a-f0-9]{64}$/;

async function json(path: string, what: string): Promise<Record<string, unknown>> {
  const text = await readFile(path).catch(() => undefined);
  if (!text || text.length > MAX_JSON) throw new InvalidArgumentError(`the image's ${what} is missing or too large`);
  try {
    const v = JSON.parse(text.toString('utf8')) as unknown;
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not an object');
    return v as Record<string, unknown>;
  } catch (err) {
    throw new InvalidArgumentError(`the image's ${what} is not valid JSON: ${(err as Error).message}`);
  }
}

function blob(layout: string, digest: unknown, what: string): string {
  if (typeof digest !== 'string' || !DIGEST.test(digest))
    throw new InvalidArgumentError(`the image's ${what} has no sha256 digest`);
  return join(layout, 'blobs', 'sha256', digest.slice(7));
}

const strings = (v: unknown): string[] | undefined =>
  Array.isArray(v) && v.every((s) => typeof s === 'string') ? (v as string[]) : undefined;

/**
 * Reads an OCI image layout as `skopeo copy` writes it (one image, tag `svc`):
 * its config and its layers. InvalidArgumentError for anything that is not a linux/amd64 image.
 */
export async function readOciLayout(layout: string): Promise<OciImage> {
  const index = await json(join(layout, 'index.json'), 'index');
  const manifests = Array.isArray(index.manifests) ? (index.manifests as Record<string, unknown>[]) : [];
  if (manifests.length !== 1)
    throw new InvalidArgumentError(`the archive holds ${manifests.length} images; import one`);
  const manifest = await json(blob(layout, manifests[0].digest, 'manifest'), 'manifest');
  const cfgDesc = manifest.config as Record<string, unknown> | undefined;
  const cfg = await json(blob(layout, cfgDesc?.digest, 'config'), 'config');
  const os = String(cfg.os ?? 'linux');
  const architecture = String(cfg.architecture ?? 'amd64');
  if (os !== 'linux' || architecture !== 'amd64')
    throw new InvalidArgumentError(`the image is for ${os}/${architecture}; svc runs linux/amd64 guests`);
  const c = (cfg.config ?? {}) as Record<string, unknown>;
  const layers = Array.isArray(manifest.layers) ? (manifest.layers as Record<string, unknown>[]) : [];
  if (layers.length > MAX_LAYERS)
    throw new InvalidArgumentError(`the image has ${layers.length} layers; at most ${MAX_LAYERS}`);
  return {
    os,
    architecture,
    config: {
      Env: strings(c.Env),
      WorkingDir: typeof c.WorkingDir === 'string' ? c.WorkingDir : undefined,
      User: typeof c.User === 'string' ? c.User : undefined,
      Entrypoint: strings(c.Entrypoint),
      Cmd: strings(c.Cmd),
    },
    layers: layers.map((l, i) => blob(layout, l.digest, `layer ${i}`)),
  };
}

/** True when a tar name (or hard-link target) climbs above the image root with `..`; a leading `/` is the root. */
export function escapes(name: string): boolean {
  if (name.includes('\0')) return true;
  let depth = 0;
  for (const p of name.split('/')) {
    if (p === '..') depth--;
    else if (p !== '' && p !== '.') depth++;
    if (depth < 0) return true;
  }
  return false;
}

/**
 * Checks every entry of every layer before anything is unpacked: a name or hard-link target that
 * climbs out of the image root (`../`), or a device node, is refused with InvalidArgumentError naming it. (umoci would
 * confine such entries; an image that carries them is refused rather than quietly changed.) So is
 * an image whose files add up to more than `limit` (a small layer of zeros unpacks a thousandfold),
 * as soon as a header says so, before its data is read.
 */
export async function checkLayers(layers: string[], limit: Room = UNPACKED_CAP): Promise<void> {
  let entries = 0;
  let bytes = 0;
  for (const [i, path] of layers.entries()) {
    const magic = await fileHead(path, 4);
    if (magic.equals(ZSTD))
      throw new InvalidArgumentError(
        `layer ${i + 1} of ${layers.length} is zstd-compressed; umoci here reads plain and gzip layers (convert with skopeo copy --dest-compress-format gzip)`,
      );
    const gzip = magic[0] === 0x1f && magic[1] === 0x8b;
    const ex = tar.extract();
    const source = createReadStream(path);
    const feeding = (gzip ? pipeline(source, createGunzip(), ex) : pipeline(source, ex)).catch((err: Error) => err);
    try {
      for await (const entry of ex) {
        const h = entry.header;
        let bad: string | undefined;
        bytes += h.size ?? 0;
        if (++entries > MAX_ENTRIES) bad = `more than ${MAX_ENTRIES} entries`;
        else if (bytes > limit.bytes)
          bad = `the layers hold more than ${formatBytes(limit.bytes)} of files (${limit.why}); it stopped at ${JSON.stringify(h.name)}`;
        else if (escapes(h.name)) bad = `entry ${JSON.stringify(h.name)} would land outside the image root`;
        else if (h.type === 'link' && escapes(h.linkname ?? ''))
          bad = `hard link ${JSON.stringify(h.name)} points outside the image root (${JSON.stringify(h.linkname)})`;
        // The guest's /dev is a devtmpfs; a device node in a layer would be made on the host while importing.
        else if (h.type === 'block-device' || h.type === 'character-device')
          bad = `entry ${JSON.stringify(h.name)} is a device node; images carry none (the guest's /dev is made at boot)`;
        if (bad) throw new InvalidArgumentError(`layer ${i + 1} of ${layers.length}: ${bad}`);
        entry.resume();
      }
      const failed = await feeding;
      if (failed) throw failed;
    } catch (err) {
      source.destroy();
      ex.destroy();
      if (err instanceof InvalidArgumentError) throw err;
      throw new InvalidArgumentError(
        `layer ${i + 1} of ${layers.length} is not a readable tar: ${(err as Error).message}`,
      );
    }
  }
}

const ZSTD = Buffer.from([0x28, 0xb5, 0x2f, 0xfd]);

/**
 * The image config as the guest init's environment file: a default PATH, the image's `Env`, and a
 * `cd` into its `WorkingDir`, so the agent (and every exec it starts) runs with them.
 */
export function imageEnvScript(c: OciImageConfig): string {
  const lines = [
    '# written by svc from the image config',
    "export PATH='/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'",
    "export HOME='/root'",
  ];
  for (const e of c.Env ?? []) {
    const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s.exec(e);
    if (m && !/[\0\n]/.test(m[2])) lines.push(`export ${m[1]}=${shellWord(m[2])}`);
  }
  const wd = c.WorkingDir && c.WorkingDir.startsWith('/') && !/[\0\n]/.test(c.WorkingDir) ? c.WorkingDir : '/';
  lines.push(`/opt/svc/bin/busybox mkdir -p ${shellWord(wd)} 2>/dev/null; cd ${shellWord(wd)} 2>/dev/null || cd /`);
  return lines.join('\n') + '\n';
}

/**
 * What `docker run` would start for the image config: `Entrypoint` then `Cmd`, as `User` (its
 * user part: the group is the user's own), in `WorkingDir`; undefined when the config names no
 * command. The agent checks it as any POST /processes body, so a `User` it cannot take refuses
 * the start rather than running it as root.
 */
export function imageEntrypoint(c: OciImageConfig | undefined): ProcessStart | undefined {
  const argv = [...(c?.Entrypoint ?? []), ...(c?.Cmd ?? [])];
  if (!argv.length || !argv[0]) return undefined;
  const start: ProcessStart = { cmd: argv[0], args: argv.slice(1), tag: ENTRYPOINT_TAG };
  const user = c?.User?.split(':')[0];
  if (user) start.user = user;
  if (c?.WorkingDir?.startsWith('/')) start.cwd = c.WorkingDir;
  return start;
}
