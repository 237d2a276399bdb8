import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import tar from 'tar-stream';
import { InvalidArgumentError } from '../../domain/errors.js';

/** A template's COPY step as the SDK sends it: `[src, dest, user, mode]`. */
export interface CopyStep {
  /** Relative to the build's context, maybe a glob (`*.txt`, `src/**`). */
  src: string;
  /** Absolute in the guest; one ending in `/` is a folder. */
  dest: string;
  uid: number;
  gid: number;
  /** The files' mode (`0755`); absent: as they were archived. */
  mode?: number;
}

const GLOB = /[*?[\]{}]/;

/**
 * Where an archived path lands, by Docker's COPY rules as E2B applies them: `src` a file goes to
 * `dest` (into it when `dest` ends in `/`); `src` a folder puts what it holds into `dest`; a glob
 * puts each match into `dest` below the glob's fixed part. Undefined: not part of `src`.
 */
export function copyTarget(src: string, dest: string, name: string, isDir: boolean): string | undefined {
  const s = posix.normalize(src).replace(/^(\.\/)+|\/+$/g, '');
  const n = posix.normalize(name).replace(/^(\.\/)+|\/+$/g, '');
  const parts = s === '.' ? [] : s.split('/');
  const fixed = parts.findIndex((p) => GLOB.test(p));
  const base = (fixed < 0 ? parts : parts.slice(0, fixed)).join('/');
  if (fixed < 0 && n === s && !isDir) return dest.endsWith('/') ? posix.join(dest, posix.basename(s)) : dest;
  if (base && n !== base && !n.startsWith(`${base}/`)) return undefined;
  const rest = base ? n.slice(base.length + 1) : n === '.' ? '' : n;
  return posix.join(dest, rest);
}

/**
 * The SDK's archive of a COPY's files (a tar, gzipped when `gz`, its paths relative to the build's
 * context) as a tar of absolute guest paths for svc's `cp mode=tar` at `/`: each entry where COPY
 * puts it, owned by the step's user, with its mode. Files, folders and symbolic links are kept;
 * hard links, devices and names outside `src` are left out.
 */
export function copyArchive(archive: Readable, gz: boolean, step: CopyStep): Readable {
  if (!step.dest.startsWith('/')) throw new InvalidArgumentError(`COPY destination ${step.dest} must be absolute`);
  const out = tar.pack();
  const ex = tar.extract();
  ex.on('entry', (h, body, next) => {
    const target = copyTarget(step.src, step.dest, h.name, h.type === 'directory');
    const keep =
      target !== undefined && target !== '/' && (h.type === 'file' || h.type === 'directory' || h.type === 'symlink');
    if (!keep) {
      body.on('end', next).resume();
      return;
    }
    const header = {
      ...h,
      name: target.slice(1),
      uid: step.uid,
      gid: step.gid,
      mode: h.type === 'file' && step.mode !== undefined ? step.mode : h.mode,
    };
    const entry = out.entry(header, (err) => (err ? ex.destroy(err) : next()));
    body.pipe(entry as unknown as NodeJS.WritableStream);
  });
  ex.on('finish', () => out.finalize());
  (gz ? pipeline(archive, createGunzip(), ex) : pipeline(archive, ex)).catch((err: Error) =>
    out.destroy(new InvalidArgumentError(`the COPY archive is not a tar${gz ? '.gz' : ''}: ${err.message}`)),
  );
  return out as unknown as Readable;
}
