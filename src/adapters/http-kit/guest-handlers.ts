import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import type { Request, Response } from 'express';
import type { CopyMode, ExecFrame, ExecRequest } from '../../domain/agent.js';
import { parseExecQuery, parseCopyMode, parseUploadQuery, requiredPath, type Query, type UploadQuery } from '../../domain/query.js';
import { writeNdjson } from './ndjson.js';
import { hasBody, sendStream, type RouteDef } from './route.js';

type Handler = RouteDef['handler'];
const query = (req: Request) => req.query as Query;

export interface ExecTarget {
  buffered(req: Request, er: ExecRequest, stdin?: Readable): Promise<unknown>;
  /** Frames as output arrives; `cancel` (when given) kills the command. */
  stream(req: Request, er: ExecRequest, stdin?: Readable): AsyncIterable<ExecFrame> & { cancel?(): void };
}

/**
 * POST exec, as the agent and the daemon's proxy both serve it: buffered answers one JSON result;
 * streamed answers NDJSON frames. The stream is opened before the status is sent, so a failure to
 * start (404, 503) is still a status; a client that leaves cancels the command.
 */
export function execHandler(t: ExecTarget): Handler {
  return async (req, res) => {
    const { buffered, ...er } = parseExecQuery(query(req));
    const stdin = hasBody(req) ? req : undefined;
    if (buffered) return void res.json(await t.buffered(req, er, stdin));
    const frames = t.stream(req, er, stdin);
    const it = frames[Symbol.asyncIterator]();
    const first = await it.next();
    await writeNdjson(res, (async function* () {
      if (!first.done) yield first.value;
      for (let n = await it.next(); !n.done; n = await it.next()) yield n.value;
    })(), () => (frames.cancel ? frames.cancel() : void it.return?.()));
  };
}

/** PUT cp: the body (a file, or a tar with mode=tar) goes to `put`; 204 when it is written. */
export function uploadHandler(put: (req: Request, q: UploadQuery, body: Readable) => Promise<void>): Handler {
  return async (req, res: Response) => {
    await put(req, parseUploadQuery(query(req)), req);
    res.status(204).end();
  };
}

/** GET cp: the file (or a tar of the tree with mode=tar) streamed back as an attachment, torn down if either side goes. */
export function downloadHandler(get: (req: Request, path: string, mode: CopyMode) => Promise<{ size?: number; body: Readable }>): Handler {
  return async (req, res) => {
    const path = requiredPath(query(req));
    const mode = parseCopyMode(query(req));
    const got = await get(req, path, mode);
    sendStream(res, { ...got, name: posix.basename(path), tar: mode === 'tar' });
  };
}
