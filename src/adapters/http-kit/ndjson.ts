import type { Request, Response } from 'express';
import { queryOne, type Query } from '../../domain/query.js';
import { onceGone } from './streams.js';

/**
 * Writes chunks to a response with backpressure (the one write loop both servers use). When the
 * client goes away it stops reading and calls `onGone` (for example to kill a command). Ends the
 * response when the chunks end; when they fail, leaves it for the caller's error handling to cut.
 */
export async function pumpTo(
  res: Response,
  chunks: AsyncIterable<string | Buffer>,
  onGone?: () => void,
): Promise<void> {
  let gone = false;
  let failed = false;
  const unhook = onceGone(res, () => {
    gone = true;
    onGone?.();
  });
  try {
    // A caller gone before the first chunk (while the chunks were being made) waits for none.
    if (gone) return void (await chunks[Symbol.asyncIterator]().return?.());
    for await (const chunk of chunks) {
      if (gone || res.destroyed) break;
      if (!res.write(chunk)) {
        await new Promise<void>((r) => {
          const done = () => {
            res.off('drain', done);
            res.off('close', done);
            r();
          };
          res.once('drain', done);
          res.once('close', done);
        });
      }
    }
  } catch (err) {
    // Not ended: an answer that ends cleanly reads as whole. Cut, it says it broke off, and a
    // reader that resumes (a watch, a process's output) comes back (answerError cuts it).
    failed = true;
    throw err;
  } finally {
    unhook();
    if (gone) onGone?.();
    if (!failed && !res.writableEnded) res.end();
  }
}

/** Writes an AsyncIterable of objects as NDJSON (one JSON object a line), with backpressure. */
export async function writeNdjson(res: Response, events: AsyncIterable<object>, onGone?: () => void): Promise<void> {
  res.status(200).type('application/x-ndjson');
  res.setHeader('Cache-Control', 'no-store');
  res.flushHeaders();
  await pumpTo(
    res,
    (async function* () {
      for await (const ev of events) yield JSON.stringify(ev) + '\n';
    })(),
    onGone,
  );
}

/**
 * Does the caller want NDJSON progress (`stream=1` or `Accept: application/x-ndjson`)? Read before
 * anything starts, so a bad `stream` (given twice) is a 400 that changed nothing.
 */
export function wantsNdjson(req: Request): boolean {
  return queryOne(req.query as Query, 'stream') === '1' || /application\/x-ndjson/.test(req.headers.accept ?? '');
}

/**
 * Answers NDJSON from the events `make` gives once it has checked the call (so a bad id is a 404,
 * not an empty stream); when the caller leaves, the signal it was given aborts.
 */
export async function followNdjson(
  res: Response,
  make: (signal: AbortSignal) => Promise<AsyncIterable<object>>,
): Promise<void> {
  const gone = new AbortController();
  await writeNdjson(res, await make(gone.signal), () => gone.abort());
}
