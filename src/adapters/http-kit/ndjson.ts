import type { Response } from 'express';

/**
 * Writes an AsyncIterable of objects as NDJSON with backpressure. When the client goes away it
 * stops reading and calls `onGone` (for example to kill a command).
 */
export async function writeNdjson(res: Response, events: AsyncIterable<object>, onGone?: () => void): Promise<void> {
  res.status(200).type('application/x-ndjson');
  res.setHeader('Cache-Control', 'no-store');
  res.flushHeaders();
  let gone = false;
  const markGone = () => {
    if (!res.writableFinished) {
      gone = true;
      onGone?.();
    }
  };
  res.once('close', markGone);
  try {
    for await (const ev of events) {
      if (gone || res.destroyed) break;
      if (!res.write(JSON.stringify(ev) + '\n')) {
        await new Promise<void>((r) => {
          res.once('drain', r);
          res.once('close', r);
        });
      }
    }
  } finally {
    res.off('close', markGone);
    if (gone) onGone?.();
    if (!res.writableEnded) res.end();
  }
}
