import { createReadStream, createWriteStream } from 'node:fs';
import { link, mkdir, rm, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import tar from 'tar-stream';
import { InvalidArgumentError, isDomainError, PayloadTooLargeError } from '../../domain/errors.js';
import {
  isMovePath,
  MAX_MOVE_FILES,
  MAX_MOVE_LINKS,
  MAX_OFFER_BYTES,
  moveByteLimit,
  offeredRecord,
  type MoveOffer,
} from '../../domain/move.js';
import type { VmFile } from '../../ports/stores.js';
import { dataExtents, sparseBody, sparseBodySize, writeSparse } from './sparse-file.js';

/** The first entry of a moved VM's tar: the offer (docs/cluster.md, "Moving a VM"). */
const OFFER = 'offer.json';
/** The pax key of an entry sent as a sparse file (sparse-file.ts): the file's own size. */
const SPARSE_KEY = 'SVC.sparse';
/** Files from this size on whose disk blocks hold less than they show are sent as sparse files. */
const SPARSE_MIN_BYTES = 1024 * 1024;

/** Is `path` worth sending as a sparse file: large, and with holes on disk (a RAM image)? */
async function holey(path: string, size: number): Promise<boolean> {
  if (size < SPARSE_MIN_BYTES) return false;
  const st = await stat(path);
  return st.blocks * 512 < size;
}

/**
 * A moved VM as one tar stream: the offer, then each of its files (the VM directory's, and its
 * snapshots folder's: a path). A file that is a second name of one sent before (a disk layer the
 * VM and its snapshots share, as hard links) goes as a hard link to the first name, no bytes.
 */
export function packVm(offer: MoveOffer, files: VmFile[]): tar.Pack {
  const pack = tar.pack();
  void (async () => {
    try {
      const head = Buffer.from(JSON.stringify(offer));
      await new Promise<void>((res, rej) =>
        pack.entry({ name: OFFER, size: head.length }, head, (e) => (e ? rej(e) : res())),
      );
      const sent = new Map<string, string>();
      for (const f of files) {
        const st = await stat(f.path);
        const inode = `${st.dev}:${st.ino}`;
        const first = sent.get(inode);
        if (first !== undefined) {
          await new Promise<void>((res, rej) =>
            pack.entry({ name: f.name, type: 'link', linkname: first, size: 0, mode: 0o600 }, (e) =>
              e ? rej(e) : res(),
            ),
          );
          continue;
        }
        sent.set(inode, f.name);
        const header = { name: f.name, size: f.size, mode: 0o600, type: 'file' as const };
        if (f.size === 0) {
          await new Promise<void>((res, rej) => pack.entry(header, Buffer.alloc(0), (e) => (e ? rej(e) : res())));
          continue;
        }
        if (await holey(f.path, f.size)) {
          const extents = await dataExtents(f.path, f.size);
          const size = sparseBodySize(extents);
          if (size < f.size) {
            const entry = pack.entry({ ...header, size, pax: { [SPARSE_KEY]: String(f.size) } });
            await pipeline(Readable.from(sparseBody(f.path, extents)), entry);
            continue;
          }
        }
        // The size said in the header, not a byte more (the VM is stopped: its files stand still).
        await pipeline(createReadStream(f.path, { end: f.size - 1 }), pack.entry(header));
      }
      pack.finalize();
    } catch (err) {
      pack.destroy(err as Error);
    }
  })();
  return pack;
}

/** The folders a path in a move's tar stands in: `snapshots/a/disk` -> `snapshots`, `snapshots/a`. */
function foldersOf(name: string): string[] {
  const parts = name.split('/');
  return parts.slice(0, -1).map((_, i) => parts.slice(0, i + 1).join('/'));
}

/**
 * Reads a moved VM's tar: its offer first (bounded, checked), then `take(offer, fill)` decides, and
 * `fill(dir)` writes the files into `dir` as they come, held to what a move may carry: plain
 * files with plain names (or paths in its snapshots folder: isMovePath), at most MAX_MOVE_FILES of
 * them, hard links to files written before in this tar (MAX_MOVE_LINKS), no more bytes than the
 * VM's disk and memory and its snapshots' can hold (moveByteLimit). Anything else is refused
 * before a byte of it is written.
 */
export async function unpackVm<T>(
  body: Readable,
  take: (offer: MoveOffer, fill: (dir: string) => Promise<void>) => Promise<T>,
): Promise<T> {
  const extract = tar.extract();
  body.on('error', (err) => extract.destroy(err));
  body.pipe(extract);
  const iter = extract[Symbol.asyncIterator]();
  // What the tar parser throws is the sender's fault (not a tar, cut short): a bad request.
  const entries = {
    next: () =>
      iter.next().catch((err: Error) => {
        throw isDomainError(err) ? err : new InvalidArgumentError(`not the tar of a moved vm: ${err.message}`);
      }),
  };
  try {
    const first = await entries.next();
    if (first.done || first.value.header.name !== OFFER)
      throw new InvalidArgumentError(`a moved vm's tar must begin with ${OFFER}`);
    if (first.value.header.size === undefined || first.value.header.size > MAX_OFFER_BYTES)
      throw new PayloadTooLargeError(`a move offer is at most ${MAX_OFFER_BYTES} bytes`);
    const chunks: Buffer[] = [];
    for await (const c of first.value) chunks.push(c as Buffer);
    let parsed: unknown;
    try {
      parsed = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      throw new InvalidArgumentError(`${OFFER} is not JSON`);
    }
    const offer = offeredRecord(parsed);
    const limit = moveByteLimit(offer.record);
    return await take(offer, async (dir) => {
      let count = 0;
      let links = 0;
      let bytes = 0;
      const written = new Set<string>();
      const folders = new Set<string>();
      for (;;) {
        const next = await entries.next();
        if (next.done) return;
        const { header } = next.value;
        if ((header.type !== 'file' && header.type !== 'link') || !isMovePath(header.name) || header.name === OFFER)
          throw new InvalidArgumentError(
            `a moved vm's tar holds only plain files with plain names; refused ${JSON.stringify(header.name)} (${header.type})`,
          );
        if (written.has(header.name)) throw new InvalidArgumentError(`a moved vm's tar names ${header.name} twice`);
        const inside = foldersOf(header.name);
        if (folders.has(header.name) || inside.some((f) => written.has(f)))
          throw new InvalidArgumentError(`a moved vm's tar names ${header.name} both as a file and as a folder`);
        const path = join(dir, header.name);
        if (inside.length) {
          await mkdir(dirname(path), { recursive: true, mode: 0o700 });
          for (const f of inside) folders.add(f);
        }
        if (header.type === 'link') {
          const to = header.linkname ?? '';
          if (!written.has(to))
            throw new InvalidArgumentError(
              `a moved vm's tar links ${header.name} only to a file it sent before; refused ${JSON.stringify(to)}`,
            );
          if (++links > MAX_MOVE_LINKS)
            throw new InvalidArgumentError(`a moved vm has at most ${MAX_MOVE_LINKS} links`);
          next.value.resume();
          await link(join(dir, to), path);
          written.add(header.name);
          continue;
        }
        if (++count > MAX_MOVE_FILES) throw new InvalidArgumentError(`a moved vm has at most ${MAX_MOVE_FILES} files`);
        const sparse = (header.pax as Record<string, string> | undefined)?.[SPARSE_KEY];
        const real = sparse === undefined ? 0 : Number(sparse);
        if (sparse !== undefined && !(/^\d+$/.test(sparse) && Number.isSafeInteger(real)))
          throw new InvalidArgumentError(`${header.name} gives no size of its own`);
        // Both what comes and what it makes count: a sparse file's holes take no bytes to send.
        bytes += Math.max(header.size ?? 0, real);
        if (bytes > limit)
          throw new PayloadTooLargeError(
            `vm ${offer.record.name}'s files pass ${limit} bytes, more than its disk and memory can hold`,
          );
        written.add(header.name);
        if (sparse === undefined) await pipeline(next.value, createWriteStream(path, { flags: 'wx', mode: 0o600 }));
        else
          await writeSparse(next.value as AsyncIterable<Buffer>, path, real).catch(async (err: unknown) => {
            await rm(path, { force: true });
            throw err;
          });
      }
    });
  } finally {
    // What was not read (a refusal) is let go; the caller closes the connection.
    body.unpipe(extract);
    extract.destroy();
  }
}
