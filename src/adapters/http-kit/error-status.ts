import { maxHeaderSize, STATUS_CODES, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { ErrorCode } from '../../domain/errors.js';
import {
  AcceptedCreateFailedError,
  AgentUnavailableError,
  errorMessage,
  isDomainError,
  isNoSpace,
  noSpaceError,
  ResourceExhaustedError,
} from '../../domain/errors.js';

/** The one mapping from domain error code to HTTP status (HTTP and WebSocket upgrades use it). */
export const STATUS_BY_CODE: Record<ErrorCode, number> = {
  invalid_argument: 400,
  invalid_state: 400,
  not_found: 404,
  already_exists: 409,
  resource_exhausted: 429,
  payload_too_large: 413,
  insufficient_storage: 507,
  unauthenticated: 401,
  permission_denied: 403,
  not_supported: 501,
  agent_unavailable: 503,
  unavailable: 503,
  agent_failure: 502,
  deadline_exceeded: 504,
  internal: 500,
};

export interface HttpError {
  status: number;
  body: { error: string; code: string };
  /** Extra response headers (Retry-After on a cap that frees up). */
  headers?: Record<string, string>;
}

/** Turns anything thrown into a status and an `{error}` body; unknown errors are 500. */
export function toHttpError(err: unknown): HttpError {
  if (err instanceof AcceptedCreateFailedError) {
    const status = err.code === 'deadline_exceeded' ? 504 : err.code === 'insufficient_storage' ? 507 : 500;
    return { status, body: { error: err.message, code: err.code } };
  }
  if (
    (err instanceof ResourceExhaustedError || err instanceof AgentUnavailableError) &&
    err.retryAfterS !== undefined
  ) {
    return {
      status: STATUS_BY_CODE[err.code],
      body: { error: err.message, code: err.code },
      headers: { 'Retry-After': String(err.retryAfterS) },
    };
  }
  if (isDomainError(err)) return { status: STATUS_BY_CODE[err.code], body: { error: err.message, code: err.code } };
  // A full disk wherever no adapter put it in words (a tar extracted, a journal, a state file)
  if (isNoSpace(err)) return toHttpError(noSpaceError(err));
  return { status: 500, body: { error: `internal error: ${errorMessage(err)}`, code: 'internal' } };
}

/**
 * Answers `err` on a plain node:http response (outside express: the browser guard, the agent's
 * identity request) as the app's error handler would: its status, headers and `{error, code}`.
 * `close` ends the connection after it (a request refused, or a body left unread).
 */
export function writeHttpError(res: ServerResponse, err: unknown, close: boolean): void {
  const { status, body, headers } = toHttpError(err);
  res.writeHead(status, {
    ...headers,
    'content-type': 'application/json; charset=utf-8',
    ...(close ? { connection: 'close' } : {}),
  });
  res.end(JSON.stringify(body));
}

/**
 * Answers on a raw socket, where there is no response object (an upgrade not taken, a request
 * node's parser refused): `status` with its reason, a JSON body and `Connection: close`, then ends it.
 */
export function answerOnSocket(
  socket: Duplex,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  const extra = Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}\r\nContent-Type: application/json; charset=utf-8\r\n${extra}` +
      `Content-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
  );
}

/** What node:http's parser refused, by its error code: status, domain code and the words for it. */
const CLIENT_ERRORS: Record<string, [number, ErrorCode, string]> = {
  HPE_HEADER_OVERFLOW: [431, 'invalid_argument', `request line and headers larger than ${maxHeaderSize} bytes`],
  HPE_CHUNK_EXTENSIONS_OVERFLOW: [413, 'payload_too_large', 'chunk extensions too large'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'deadline_exceeded', 'the request headers did not arrive in time'],
};

/**
 * A server's `clientError` handler: a request node:http's parser refused (headers past its limit,
 * not HTTP, headers too slow) gets its status with an `{error, code}` body like every other refusal,
 * where node would answer with no body at all. A connection already answering, or gone, is closed.
 */
export function answerClientError(err: Error & { code?: string }, socket: Duplex): void {
  const answering = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent;
  if (err.code === 'ECONNRESET' || !socket.writable || answering) return void socket.destroy();
  const [status, code, error] = CLIENT_ERRORS[err.code ?? ''] ?? [
    400,
    'invalid_argument',
    `not a valid HTTP request (${err.code ?? err.message})`,
  ];
  answerOnSocket(socket, status, { error, code });
}
