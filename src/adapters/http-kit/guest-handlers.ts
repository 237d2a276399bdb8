import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import { TAKE_RAW, type RawTakeable } from '../../ports/guest-agent.js';
import type { Request, Response } from 'express';
import type { CopyMode, ExecFrame, ExecRequest } from '../../domain/agent.js';
import {
  parseExecQuery,
  parseCopyMode,
  parseUploadQuery,
  requiredPath,
  type Query,
  type UploadQuery,
} from '../../domain/query.js';
import { toHttpError } from './error-status.js';
import { declaredLength, takeConnection } from './take-connection.js';
import { writeNdjson } from './ndjson.js';
import { hasBody, sendStream, type RouteDef } from './route.js';
import { onceGone } from './streams.js';

type Handler = RouteDef['handler'];
const query = (req: Request) => req.query as Query;

export interface ExecTarget {
  /** `gone` aborts when the client leaves before the answer: the command is killed. */
  buffered(req: Request, er: ExecRequest, stdin: Readable | undefined, gone: AbortSignal): Promise<unknown>;
  /** Frames as output arrives; `gone` aborts when the client leaves: the command is killed. */
  stream(req: Request, er: ExecRequest, stdin: Readable | undefined, gone: AbortSignal): AsyncIterable<ExecFrame>;
}

/** The last frame of a stream that broke: the error's words and code, as an HTTP error would carry them. */
function errorFrame(err: unknown): ExecFrame {
  const { body } = toHttpError(err);
  return { type: 'error', t: new Date().toISOString(), error: body.error, code: body.code };
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
    // A pending read cannot be interrupted by ending an iterator, so leaving is a signal.
    const gone = new AbortController();
    onceGone(res, () => gone.abort());
    if (buffered) return void res.json(await t.buffered(req, er, stdin, gone.signal));
    const it = t.stream(req, er, stdin, gone.signal)[Symbol.asyncIterator]();
    const first = await it.next();
    await writeNdjson(
      res,
      (async function* () {
        try {
          if (!first.done) yield first.value;
          for (let n = await it.next(); !n.done; n = await it.next()) yield n.value;
        } catch (err) {
          // The status is long sent: a stream that breaks (the guest gone, a bad frame) ends with
          // an error frame, so the client never takes a cut-off stream for a whole one.
          if (!gone.signal.aborted) yield errorFrame(err);
        } finally {
          // Closing early (the client left between frames) must close the source too: it holds the
          // command and its exec slot until its own cleanup runs.
          await it.return?.();
        }
      })(),
      () => gone.abort(),
    );
  };
}

/**
 * PUT cp: the body (a file, or a tar with mode=tar) goes to `put` with its declared length, if
 * any; 204 when it is written.
 */
export function uploadHandler(
  put: (req: Request, q: UploadQuery & { size?: number }, body: Readable) => Promise<void>,
): Handler {
  return async (req, res: Response) => {
    const size = declaredLength(req);
    const q = { ...parseUploadQuery(query(req)), size };
    await put(req, q, size === undefined ? req : offerConnection(req, res));
    res.status(204).end();
  };
}

/**
 * The request as an upload body that can also hand over its connection ([TAKE_RAW]), for the
 * adapter that moves a large body socket to socket (`takeConnection`).
 */
function offerConnection(req: Request, res: Response): Readable {
  const body = req as Request & RawTakeable;
  body[TAKE_RAW] = () => takeConnection(req, res);
  return body;
}

/** GET cp: the file (or a tar of the tree with mode=tar) streamed back as an attachment, torn down if either side goes. */
export function downloadHandler(
  get: (req: Request, path: string, mode: CopyMode) => Promise<{ size?: number; body: Readable }>,
): Handler {
  return async (req, res) => {
    const path = requiredPath(query(req));
    const mode = parseCopyMode(query(req));
    const got = await get(req, path, mode);
    sendStream(res, { ...got, name: posix.basename(path), tar: mode === 'tar' });
  };
}
