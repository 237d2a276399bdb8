import { createHash, type Hash } from 'node:crypto';
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

/**
 * How long a download may take in all, how long it may send nothing, and how many times one that
 * broke off (or went silent) is resumed where it stopped, when its server can.
 */
export const DOWNLOAD_TIMEOUTS: Timeouts = { totalMs: 60 * 60_000, idleMs: 60_000, resumes: 5 };

/** What a download into `dir` may come to: the file and the qcow2 made of it must both fit. */
export const downloadRoom = (dir: string): Promise<Room> => roomIn(dir, 2, DISK_FILE_CAP, 'the download and its qcow2');

/**
 * Downloads a disk's URL into `file`, bounded by `limit` (a Content-Length over it is refused
 * before a byte is read; a body that passes it is cut off), by DOWNLOAD_TIMEOUTS, and checked
 * against the source's digest. Redirects are followed; one that lands on plain HTTP needs the
 * digest as a plain-HTTP URL does. A body that breaks off or goes silent is asked for again from
 * the byte it stopped at (`Range`, with `If-Range` so the rest is of the same file), up to
 * `timeouts.resumes` times, from a server that said it takes ranges and named the file's version
 * (a strong ETag or Last-Modified) and length; one that answers with the whole file instead (it
 * changed) is downloaded again from its start. Every failure is an InvalidArgumentError that
 * names the URL.
 */
export async function downloadDisk(
  source: UrlSource,
  file: string,
  limit: Room,
  progress: (p: ImageProgress) => void,
  timeouts: Timeouts = DOWNLOAD_TIMEOUTS,
): Promise<void> {
  await new Download(source, file, limit, progress, timeouts).run();
}

type Timeouts = { totalMs: number; idleMs: number; resumes?: number };

/** One download: its attempts (the first, and the resumes), the bytes come so far and their hash. */
class Download {
  private readonly overall = new AbortController();
  private readonly algorithm: string;
  private readonly want: string | undefined;
  private hash: Hash | undefined;
  private idle: NodeJS.Timeout | undefined;
  /** Where the bytes come from after the first answer (its redirects followed), and which version they are of. */
  private at: string;
  private version: string | undefined;
  private length = NaN;
  private rangeable = false;
  private got = 0;

  constructor(
    private readonly source: UrlSource,
    private readonly file: string,
    private readonly limit: Room,
    private readonly progress: (p: ImageProgress) => void,
    private readonly timeouts: Timeouts,
  ) {
    [this.algorithm, this.want] = source.digest ? source.digest.split(':') : ['sha256', undefined];
    this.hash = this.want ? createHash(this.algorithm) : undefined;
    this.at = source.url;
  }

  private refuse(why: string): InvalidArgumentError {
    return new InvalidArgumentError(`from: ${this.source.url}: ${why}`);
  }

  async run(): Promise<void> {
    const { totalMs, resumes = 0 } = this.timeouts;
    const total = setTimeout(
      () => this.overall.abort(this.refuse(`not downloaded within ${totalMs / 60_000} minutes`)),
      totalMs,
    ).unref();
    try {
      for (let resumed = 0; ; resumed++) {
        const broken = await this.attempt();
        if (!broken) break;
        if (!this.rangeable || resumed >= resumes) throw broken;
        this.progress({
          percent: 5 + Math.floor((this.got / this.length) * 50),
          message: `the download stopped at ${formatBytes(this.got)} (${broken.message.replace(`from: ${this.source.url}: `, '')}); resuming there (${resumed + 1} of ${resumes})`,
        });
      }
      this.progress({ percent: 55, message: `downloaded ${formatBytes(this.got)}` });
    } finally {
      clearTimeout(this.idle);
      clearTimeout(total);
    }
    if (this.hash) {
      const is = this.hash.digest('hex');
      if (is !== this.want) throw this.refuse(`its ${this.algorithm} is ${is}, not the digest given (${this.want})`);
    }
  }

  /**
   * Asks for the file (from `got` on, after the first bytes) and writes what comes. Undefined when
   * it is whole; else why it was not, for a resume. What cannot be resumed is thrown.
   */
  private async attempt(): Promise<InvalidArgumentError | undefined> {
    const attempt = new AbortController();
    const signal = AbortSignal.any([this.overall.signal, attempt.signal]);
    const stall = () => {
      clearTimeout(this.idle);
      this.idle = setTimeout(
        () => attempt.abort(this.refuse(`nothing came for ${this.timeouts.idleMs / 1000} s`)),
        this.timeouts.idleMs,
      ).unref();
    };
    const failed = (err: unknown, what: string): InvalidArgumentError => {
      if (this.overall.signal.aborted) throw this.overall.signal.reason;
      if (attempt.signal.aborted) return attempt.signal.reason as InvalidArgumentError;
      if (err instanceof InvalidArgumentError) throw err; // the limit, passed
      return this.refuse(`${what}: ${causeOf(err)}`);
    };
    stall();
    // identity: the bytes counted and hashed are the file's, and Content-Length is their number
    const headers: Record<string, string> = { 'accept-encoding': 'identity' };
    if (this.got > 0) Object.assign(headers, { range: `bytes=${this.got}-`, 'if-range': this.version });
    let res: Response;
    try {
      res = await fetch(this.at, { signal, redirect: 'follow', headers });
    } catch (err) {
      const broken = failed(err, 'could not be reached');
      if (this.got === 0) throw broken;
      return broken;
    }
    await this.take(res);
    if (!res.body) throw this.refuse('answered without a body');
    const append = this.got > 0;
    const body = Readable.fromWeb(res.body as ReadableStream<Uint8Array>, { signal });
    const counter = this.counter(stall);
    // A body that breaks off ends the file where it broke: what came is written, not dropped with
    // the writes still waiting, so the bytes counted (and hashed) are the file's when it resumes.
    let broke: unknown;
    body.once('error', (err) => {
      broke = err;
      counter.end();
    });
    body.pipe(counter);
    const written = await pipeline(
      counter,
      createWriteStream(this.file, { mode: 0o600, flags: append ? 'a' : 'w' }),
    ).then(
      () => undefined,
      (err: unknown) => err ?? new Error('the file could not be written'),
    );
    if (written !== undefined) body.destroy();
    const cause = written ?? broke;
    const broken = cause === undefined ? undefined : failed(cause, 'the download broke off');
    if (broken || !Number.isFinite(this.length) || this.got === this.length) return broken;
    return this.refuse(`${formatBytes(this.got)} came of the ${formatBytes(this.length)} announced`);
  }

  /**
   * Checks an answer before its body is read: a resume's must be the rest of the same file (a
   * whole file instead, its version changed, starts it over); a first one must be a success, not
   * plain HTTP without a digest, and not longer than the limit. InvalidArgumentError if not.
   */
  private async take(res: Response): Promise<void> {
    const refuse = async (why: string) => {
      await res.body?.cancel().catch(() => undefined);
      return this.refuse(why);
    };
    if (this.got > 0 && res.status === 200) {
      this.got = 0;
      this.hash = this.want ? createHash(this.algorithm) : undefined;
    } else if (this.got > 0) {
      const range = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(res.headers.get('content-range') ?? '');
      if (res.status !== 206 || Number(range?.[1]) !== this.got || Number(range?.[3]) !== this.length)
        throw await refuse(
          `asked for the rest from byte ${this.got}, it answered ${res.status} ${res.headers.get('content-range') ?? ''}`.trim(),
        );
      return;
    }
    if (!res.ok) throw await refuse(`answered ${res.status} ${res.statusText}`.trim());
    if (new URL(res.url).protocol === 'http:' && !this.want)
      throw await refuse(`redirected to plain HTTP (${new URL(res.url).origin}); give the image's digest`);
    this.length = Number(res.headers.get('content-length') ?? NaN);
    if (this.length > this.limit.bytes)
      throw await refuse(`${formatBytes(this.length)}, more than ${formatBytes(this.limit.bytes)} (${this.limit.why})`);
    this.at = res.url;
    const etag = res.headers.get('etag');
    this.version = etag && !etag.startsWith('W/') ? etag : (res.headers.get('last-modified') ?? undefined);
    this.rangeable = res.headers.get('accept-ranges') === 'bytes' && !!this.version && Number.isFinite(this.length);
  }

  /** Counts, bounds and hashes the bytes as they pass, reporting progress and keeping the stall timer off. */
  private counter(stall: () => void): Transform {
    let shown = -1;
    return new Transform({
      transform: (chunk: Buffer, _enc, done) => {
        stall();
        this.got += chunk.length;
        const { bytes, why } = this.limit;
        if (this.got > bytes)
          return done(this.refuse(`more than ${formatBytes(bytes)} (${why}); the download was stopped`));
        this.hash?.update(chunk);
        const pct = Number.isFinite(this.length) && this.length > 0 ? Math.floor((this.got / this.length) * 50) : -1;
        if (pct !== shown) {
          shown = pct;
          this.progress({
            percent: 5 + Math.max(0, pct),
            message: `downloading: ${formatBytes(this.got)}${pct >= 0 ? ` of ${formatBytes(this.length)}` : ''}`,
          });
        }
        done(null, chunk);
      },
    });
  }
}

/** What fetch's "fetch failed" was for (ECONNREFUSED, a certificate not trusted, ...). */
function causeOf(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  return (cause?.code ?? cause?.message ?? errorMessage(err)).slice(0, 300);
}
