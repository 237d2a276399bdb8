import { isUtf8 } from 'node:buffer';
import type { OutputFrame, OutputPiece, ProcessStream } from '../../domain/processes.js';

/**
 * A process's output between the agent and the daemon, unencoded (GET .../output?raw=1): a JSON
 * head line per piece, `{stream, offset, n}` followed by exactly `n` bytes of the stream, or a
 * frame that carries no bytes (`truncated`, the end) alone. The daemon makes frames of them on the
 * host: encoding (UTF-8 checks, JSON escapes, base64) is the costliest step of a follow, and in a
 * guest under TCG it would take the CPU the process itself needs (docs/processes.md).
 */
export const PIECES_TYPE = 'application/x-svc-output-pieces';

/** Bytes of a frame's data, at most (before base64): a piece read at once is cut into frames of this. */
export const FRAME_BYTES = 64 * 1024;

/**
 * The frames of `bytes` read at `offset`: UTF-8 text when it is (cut only between characters),
 * base64 otherwise; each of at most FRAME_BYTES bytes.
 */
export function* encodeFrames(stream: ProcessStream, offset: number, bytes: Uint8Array): Iterable<OutputFrame> {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const text = isUtf8(b);
  for (let pos = 0; pos < b.length;) {
    let end = Math.min(b.length, pos + FRAME_BYTES);
    // back up to a character's first byte (never past three continuation bytes, so never to pos)
    if (text) while (end < b.length && end > pos + 1 && (b[end] & 0xc0) === 0x80) end--;
    const part = b.subarray(pos, end);
    yield text
      ? { stream, offset: offset + pos, data: part.toString('utf8') }
      : { stream, offset: offset + pos, data: part.toString('base64'), encoding: 'base64' };
    pos = end;
  }
}

/** Pieces as frames (the agent's NDJSON answer, for callers that did not ask for pieces). */
export async function* framesOf(pieces: AsyncIterable<OutputPiece>): AsyncIterable<OutputFrame> {
  for await (const p of pieces) {
    if ('bytes' in p) yield* encodeFrames(p.stream, p.offset, p.bytes);
    else yield p;
  }
}

/** Pieces as the chunks of a PIECES_TYPE body. */
export async function* pieceChunks(pieces: AsyncIterable<OutputPiece>): AsyncIterable<string | Buffer> {
  for await (const p of pieces) {
    if (!('bytes' in p)) {
      yield `${JSON.stringify(p)}\n`;
      continue;
    }
    yield `${JSON.stringify({ stream: p.stream, offset: p.offset, n: p.bytes.byteLength })}\n`;
    yield Buffer.from(p.bytes.buffer, p.bytes.byteOffset, p.bytes.byteLength);
  }
}

/** Why a PIECES_TYPE body could not be read; the caller names the peer. */
export class BadPieces extends Error {}

/**
 * A PIECES_TYPE body's pieces, each head at most `maxHead` bytes and each piece at most
 * `maxBytes`: what a peer sends beyond those, or a head that is not JSON, is a BadPieces. The
 * heads are returned as parsed, unchecked; the caller checks them.
 */
export async function* readPieces(
  input: AsyncIterable<unknown>,
  maxHead: number,
  maxBytes: number,
): AsyncIterable<{ head: unknown; bytes?: Buffer }> {
  let buf: Buffer = Buffer.alloc(0);
  let head: { head: unknown; n: number } | undefined;
  // A piece's bytes as they come, joined once when all are there (not once per chunk: a 256 KiB
  // piece in 16 KiB reads would be copied eight times over).
  let parts: Buffer[] = [];
  let have = 0;
  for await (const c of input) {
    if (head) {
      parts.push(c as Buffer);
      have += (c as Buffer).length;
      if (have < head.n) continue;
      buf = parts.length === 1 ? parts[0] : Buffer.concat(parts, have);
      parts = [];
      have = 0;
    } else buf = buf.length ? Buffer.concat([buf, c as Buffer]) : (c as Buffer);
    for (;;) {
      if (!head) {
        const nl = buf.indexOf(10);
        if (nl < 0) {
          if (buf.length > maxHead) throw new BadPieces(`a piece head longer than ${maxHead} bytes`);
          break;
        }
        if (nl > maxHead) throw new BadPieces(`a piece head longer than ${maxHead} bytes`);
        let v: unknown;
        try {
          v = JSON.parse(buf.subarray(0, nl).toString('utf8'));
        } catch {
          throw new BadPieces(`a piece head that is not JSON: ${JSON.stringify(buf.subarray(0, 80).toString('utf8'))}`);
        }
        buf = buf.subarray(nl + 1);
        const n = (v as { n?: unknown } | null)?.n;
        if (n === undefined) {
          yield { head: v };
          continue;
        }
        if (!Number.isSafeInteger(n) || (n as number) < 1 || (n as number) > maxBytes)
          throw new BadPieces(`a piece of ${JSON.stringify(n)} bytes (1 to ${maxBytes})`);
        head = { head: v, n: n as number };
      }
      if (buf.length < head.n) {
        if (buf.length) parts = [buf];
        have = buf.length;
        buf = Buffer.alloc(0);
        break;
      }
      const bytes = Buffer.from(buf.subarray(0, head.n)); // its own memory: buf's may be large
      buf = buf.subarray(head.n);
      const h = head.head;
      head = undefined;
      yield { head: h, bytes };
    }
  }
  if (head || buf.length || have) throw new BadPieces('the body ended inside a piece');
}
