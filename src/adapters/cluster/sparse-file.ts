import { open } from 'node:fs/promises';
import { InvalidArgumentError } from '../../domain/errors.js';

/**
 * A file with holes as one tar entry of a move (vm-bundle.ts): a suspended VM's RAM image is mostly
 * pages its guest never touched, holes in the file, and sent whole they would cross the network as
 * zeros and land as zeros written to disk. The entry's body is each extent that holds data: a
 * 16-byte record (offset and length, big-endian), then its bytes. The rest reads zero: holes where
 * it lands.
 */

/** A block all zeros is a hole. */
export const SPARSE_BLOCK = 64 * 1024;
const RECORD = 16;
const CHUNK = 1 << 20;

export interface Extent {
  offset: number;
  length: number;
}

/** The extents of the first `size` bytes of `path` that hold anything but zeros, in order (adjacent ones merged). */
export async function dataExtents(path: string, size: number): Promise<Extent[]> {
  const fh = await open(path, 'r');
  const buf = Buffer.alloc(CHUNK);
  const zero = Buffer.alloc(SPARSE_BLOCK);
  const out: Extent[] = [];
  try {
    for (let pos = 0; pos < size;) {
      const want = Math.min(CHUNK, size - pos);
      const { bytesRead } = await fh.read(buf, 0, want, pos);
      if (bytesRead !== want) throw new Error(`${path} is shorter than ${size} bytes`);
      for (let i = 0; i < want; i += SPARSE_BLOCK) {
        const n = Math.min(SPARSE_BLOCK, want - i);
        if (buf.compare(zero, 0, n, i, i + n) === 0) continue;
        const last = out.at(-1);
        if (last && last.offset + last.length === pos + i) last.length += n;
        else out.push({ offset: pos + i, length: n });
      }
      pos += want;
    }
  } finally {
    await fh.close();
  }
  return out;
}

/** The bytes of a sparse entry's body with these extents. */
export const sparseBodySize = (extents: Extent[]) => extents.reduce((n, e) => n + RECORD + e.length, 0);

/** A sparse entry's body: each extent's record, then its bytes. */
export async function* sparseBody(path: string, extents: Extent[]): AsyncIterable<Buffer> {
  const fh = await open(path, 'r');
  try {
    for (const e of extents) {
      const rec = Buffer.alloc(RECORD);
      rec.writeBigUInt64BE(BigInt(e.offset), 0);
      rec.writeBigUInt64BE(BigInt(e.length), 8);
      yield rec;
      for (let done = 0; done < e.length;) {
        const n = Math.min(CHUNK, e.length - done);
        const buf = Buffer.alloc(n);
        const { bytesRead } = await fh.read(buf, 0, n, e.offset + done);
        if (bytesRead !== n) throw new Error(`${path} changed while it was sent`);
        yield buf;
        done += n;
      }
    }
  } finally {
    await fh.close();
  }
}

/**
 * Writes a sparse entry's body into the new file `path` of `size` bytes: each extent at its offset,
 * the rest left a hole. The extents must come in order, not overlap, hold a byte at least and end
 * within `size`, and the body must be whole: else InvalidArgumentError (the caller removes the file).
 */
export async function writeSparse(body: AsyncIterable<Buffer>, path: string, size: number): Promise<void> {
  const bad = (why: string) => new InvalidArgumentError(`the sparse file ${path.split('/').pop()} ${why}`);
  const fh = await open(path, 'wx', 0o600);
  try {
    await fh.truncate(size);
    let record = Buffer.alloc(0); // a record begun in one chunk and ended in the next
    let left = 0; // bytes of the current extent still to come
    let at = 0; // where they go
    let end = 0; // where the last extent ended
    for await (const chunk of body) {
      let c = chunk;
      while (c.length) {
        if (left === 0) {
          const take = Math.min(RECORD - record.length, c.length);
          record = Buffer.concat([record, c.subarray(0, take)]);
          c = c.subarray(take);
          if (record.length < RECORD) break;
          const offset = Number(record.readBigUInt64BE(0));
          const length = Number(record.readBigUInt64BE(8));
          record = Buffer.alloc(0);
          if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || length === 0)
            throw bad('has an extent that is not one');
          if (offset < end) throw bad('has extents out of order or overlapping');
          if (offset + length > size) throw bad(`has an extent past its ${size} bytes`);
          at = offset;
          left = length;
          end = offset + length;
          continue;
        }
        const n = Math.min(left, c.length);
        await fh.write(c, 0, n, at);
        at += n;
        left -= n;
        c = c.subarray(n);
      }
    }
    if (left || record.length) throw bad('is cut short');
  } finally {
    await fh.close();
  }
}
