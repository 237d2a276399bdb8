import type { Request, Response } from 'express';
import { DomainError, InvalidArgumentError, PayloadTooLargeError } from '../../domain/errors.js';
import type { RouteDef } from '../http-kit/route.js';

/**
 * The Connect protocol (connectrpc.com/docs/protocol), JSON codec, as E2B's envd speaks it and its
 * SDK calls it: a unary call is a POST of `application/json` answered with JSON; a server stream is
 * a POST of one enveloped message (`application/connect+json`: a flags byte, a 4-byte big-endian
 * length, the JSON) answered with enveloped messages and an end-of-stream envelope (flags 0x02)
 * that carries the error, if any. Only what E2B's services use is here.
 */

/** Connect's error codes and the HTTP status of a unary call that fails with each. */
const STATUS = {
  canceled: 499,
  unknown: 500,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  already_exists: 409,
  permission_denied: 403,
  resource_exhausted: 429,
  failed_precondition: 412,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  unauthenticated: 401,
} as const;
export type ConnectCode = keyof typeof STATUS;

export class RpcError extends Error {
  constructor(
    readonly code: ConnectCode,
    message: string,
  ) {
    super(message);
  }
}

/** svc's errors as Connect's codes. */
export function toRpcError(err: unknown): RpcError {
  if (err instanceof RpcError) return err;
  if (err instanceof DomainError) {
    const code: ConnectCode =
      (
        {
          invalid_argument: 'invalid_argument',
          invalid_state: 'failed_precondition',
          not_found: 'not_found',
          already_exists: 'already_exists',
          resource_exhausted: 'resource_exhausted',
          payload_too_large: 'resource_exhausted',
          insufficient_storage: 'resource_exhausted',
          unauthenticated: 'unauthenticated',
          permission_denied: 'permission_denied',
          not_supported: 'unimplemented',
          agent_unavailable: 'unavailable',
          deadline_exceeded: 'deadline_exceeded',
        } as Record<string, ConnectCode>
      )[err.code] ?? 'internal';
    return new RpcError(code, err.message);
  }
  const status = (err as { status?: unknown })?.status; // the daemon's own answer (SvcError)
  if (typeof status === 'number') {
    const byStatus: Record<number, ConnectCode> = {
      0: 'unavailable',
      400: 'invalid_argument',
      401: 'unauthenticated',
      403: 'permission_denied',
      404: 'not_found',
      409: 'already_exists',
      413: 'resource_exhausted',
      429: 'resource_exhausted',
      507: 'resource_exhausted',
      501: 'unimplemented',
      503: 'unavailable',
      504: 'deadline_exceeded',
    };
    return new RpcError(byStatus[status] ?? 'internal', (err as Error).message);
  }
  return new RpcError('internal', (err as Error)?.message ?? String(err));
}

export interface RpcCall {
  req: Request;
  /** Aborts when the caller goes away. */
  signal: AbortSignal;
}

export type UnaryMethod = (msg: Record<string, unknown>, call: RpcCall) => Promise<unknown>;
export type StreamMethod = (msg: Record<string, unknown>, call: RpcCall) => AsyncIterable<unknown>;

export interface RpcService {
  unary?: Record<string, UnaryMethod>;
  stream?: Record<string, StreamMethod>;
}

/** The largest request message taken (SendInput carries a client's stdin). */
const MAX_MESSAGE = 16 << 20;

async function readBody(req: Request): Promise<Buffer> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > MAX_MESSAGE) throw new PayloadTooLargeError(`a message over ${MAX_MESSAGE} bytes`);
    parts.push(c);
  }
  return Buffer.concat(parts);
}

function parseMessage(bytes: Buffer): Record<string, unknown> {
  if (!bytes.length) return {};
  let v: unknown;
  try {
    v = JSON.parse(bytes.toString('utf8'));
  } catch {
    throw new InvalidArgumentError('the message is not JSON');
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new InvalidArgumentError('the message is not an object');
  return v as Record<string, unknown>;
}

/** One enveloped message. */
export function envelope(flags: number, msg: unknown): Buffer {
  const body = Buffer.from(JSON.stringify(msg));
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
}

/** The message of a request that holds one envelope. */
function unwrap(body: Buffer): Buffer {
  if (body.length < 5) throw new InvalidArgumentError('a streaming request without its envelope');
  const len = body.readUInt32BE(1);
  if (body[0] & 0x01) throw new RpcError('unimplemented', 'compressed messages are not supported');
  if (5 + len !== body.length) throw new InvalidArgumentError('a streaming request must hold exactly one message');
  return body.subarray(5);
}

function sendUnaryError(res: Response, e: RpcError): void {
  if (res.headersSent) return void res.destroy();
  res.status(STATUS[e.code]).json({ code: e.code, message: e.message });
}

/**
 * Routes for `base/<package.Service>/<Method>`: each service's unary and server-streaming methods.
 * Routes carry no bearer check of their own (`auth: none`); `guard` checks each call first.
 */
export function connectRoutes(
  base: string,
  services: Record<string, RpcService>,
  guard: (req: Request) => void | Promise<void>,
): RouteDef[] {
  const routes: RouteDef[] = [];
  /** A method's route: a raw POST, no bearer check of its own, and a signal that aborts when the caller leaves. */
  const method = (path: string, handle: (req: Request, res: Response, gone: AbortSignal) => Promise<void>) =>
    routes.push({
      method: 'post',
      path,
      body: 'raw',
      auth: 'none',
      handler: async (req, res) => {
        const gone = new AbortController();
        res.once('close', () => gone.abort());
        await handle(req, res, gone.signal);
      },
    });
  for (const [service, s] of Object.entries(services)) {
    for (const [name, fn] of Object.entries(s.unary ?? {})) {
      method(`${base}/${service}/${name}`, async (req, res, gone) => {
        try {
          await guard(req);
          const msg = parseMessage(await readBody(req));
          res.status(200).json((await fn(msg, { req, signal: gone })) ?? {});
        } catch (err) {
          sendUnaryError(res, toRpcError(err));
        }
      });
    }
    for (const [name, fn] of Object.entries(s.stream ?? {})) {
      method(`${base}/${service}/${name}`, async (req, res, gone) => {
        let events: AsyncIterable<unknown>;
        try {
          await guard(req);
          events = fn(parseMessage(unwrap(await readBody(req))), { req, signal: gone });
        } catch (err) {
          return sendUnaryError(res, toRpcError(err));
        }
        res.status(200).setHeader('Content-Type', 'application/connect+json');
        res.flushHeaders();
        let end: unknown = {};
        try {
          for await (const ev of events) {
            if (gone.aborted) break;
            if (!res.write(envelope(0, ev))) await new Promise((r) => res.once('drain', r).once('close', r));
          }
        } catch (err) {
          const e = toRpcError(err);
          end = { error: { code: e.code, message: e.message } };
        }
        if (!res.destroyed) res.end(envelope(0x02, end));
      });
    }
  }
  return routes;
}
