import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream } from 'node:stream/web';
import { formatBytes } from '../../domain/bytes.js';
import { InvalidArgumentError, errorMessage } from '../../domain/errors.js';
import type { UrlSource } from '../../domain/image-request.js';
import type { ImageProgress } from '../../ports/guest-images.js';
import { roomIn, type Room } from '../fs-kit/free-room.js';
import { DISK_FILE_CAP } from './import-files.js';

/** How long a download may take in all, and how long it may send nothing. */
export const DOWNLOAD_TIMEOUTS = { totalMs: 60 * 60_000, idleMs: 60_000 };

/** What a download into `dir` may come to: the file and the qcow2 made of it must both fit. */
export const downloadRoom = (dir: string): Promise<Room> => roomIn(dir, 2, DISK_FILE_CAP, 'the download and its qcow2');

/**
 * Downloads a disk's URL into `file`, bounded by `limit` (a Content-Length over it is refused
 * before a byte is read; a body that passes it is cut off), by DOWNLOAD_TIMEOUTS, and checked
 * against the source's digest. Redirects are followed; one that lands on plain HTTP needs the
 * digest as a plain-HTTP URL does. Every failure is an InvalidArgumentError that names the URL.
 */
export async function downloadDisk(
  source: UrlSource,
  file: string,
  limit: Room,
  progress: (p: ImageProgress) => void,
  timeouts = DOWNLOAD_TIMEOUTS,
): Promise<void> {
  const refuse = (why: string) => new InvalidArgumentError(`from: ${source.url}: ${why}`);
  const abort = new AbortController();
  let idle: NodeJS.Timeout | undefined;
  const stall = () => {
    clearTimeout(idle);
    idle = setTimeout(
      () => abort.abort(refuse(`nothing came for ${timeouts.idleMs / 1000} s`)),
      timeouts.idleMs,
    ).unref();
  };
  const total = setTimeout(
    () => abort.abort(refuse(`not downloaded within ${timeouts.totalMs / 60_000} minutes`)),
    timeouts.totalMs,
  ).unref();
  const [algorithm, want] = source.digest ? source.digest.split(':') : ['sha256', undefined];
  const hash = want ? createHash(algorithm) : undefined;
  try {
    stall();
    // identity: the bytes counted and hashed are the file's, and Content-Length is their number
    const headers = { 'accept-encoding': 'identity' };
    const res = await fetch(source.url, { signal: abort.signal, redirect: 'follow', headers }).catch((err: unknown) => {
      throw abort.signal.aborted ? abort.signal.reason : refuse(`could not be reached: ${causeOf(err)}`);
    });
    if (!res.ok) {
      await res.body?.cancel().catch(() => undefined);
      throw refuse(`answered ${res.status} ${res.statusText}`.trim());
    }
    if (new URL(res.url).protocol === 'http:' && !want) {
      await res.body?.cancel().catch(() => undefined);
      throw refuse(`redirected to plain HTTP (${new URL(res.url).origin}); give the image's digest`);
    }
    const length = Number(res.headers.get('content-length') ?? NaN);
    if (length > limit.bytes) {
      await res.body?.cancel().catch(() => undefined);
      throw refuse(`${formatBytes(length)}, more than ${formatBytes(limit.bytes)} (${limit.why})`);
    }
    if (!res.body) throw refuse('answered without a body');
    let got = 0;
    let shown = -1;
    const count = new Transform({
      transform(chunk: Buffer, _enc, done) {
        stall();
        got += chunk.length;
        if (got > limit.bytes)
          return done(refuse(`more than ${formatBytes(limit.bytes)} (${limit.why}); the download was stopped`));
        hash?.update(chunk);
        const pct = Number.isFinite(length) && length > 0 ? Math.floor((got / length) * 50) : -1;
        if (pct !== shown) {
          shown = pct;
          progress({
            percent: 5 + Math.max(0, pct),
            message: `downloading: ${formatBytes(got)}${pct >= 0 ? ` of ${formatBytes(length)}` : ''}`,
          });
        }
        done(null, chunk);
      },
    });
    await pipeline(
      Readable.fromWeb(res.body as ReadableStream<Uint8Array>, { signal: abort.signal }),
      count,
      createWriteStream(file, { mode: 0o600 }),
    ).catch((err: unknown) => {
      if (err instanceof InvalidArgumentError) throw err;
      throw abort.signal.aborted ? abort.signal.reason : refuse(`the download broke off: ${causeOf(err)}`);
    });
    if (Number.isFinite(length) && got !== length)
      throw refuse(`${formatBytes(got)} came of the ${formatBytes(length)} announced`);
    progress({ percent: 55, message: `downloaded ${formatBytes(got)}` });
  } finally {
    clearTimeout(idle);
    clearTimeout(total);
  }
  if (hash) {
    const is = hash.digest('hex');
    if (is !== want) throw refuse(`its ${algorithm} is ${is}, not the digest given (${want})`);
  }
}

/** What fetch's "fetch failed" was for (ECONNREFUSED, a certificate not trusted, ...). */
function causeOf(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  return (cause?.code ?? cause?.message ?? errorMessage(err)).slice(0, 300);
}
