/** How the daemon reads what an agent answers: the size limits and the mapping of failures to domain errors. */
import {
  AgentFailureError,
  AgentUnavailableError,
  AlreadyExistsError,
  InvalidArgumentError,
  NotFoundError,
  NotSupportedError,
  InvalidStateError,
  InsufficientStorageError,
  PayloadTooLargeError,
  ResourceExhaustedError,
  type ErrorCode,
} from '../../domain/errors.js';
import { EXEC_ANSWER_LIMIT } from '../../domain/agent.js';
import type { AgentEndpoint } from '../../ports/guest-agent.js';

/**
 * What the daemon reads from a guest, at most (docs/security.md: guests are hostile). Small
 * answers (health, stats, fs, errors) fit in 1 MiB; a buffered exec's two 16 MiB streams fit in
 * 64 MiB even JSON-escaped as base64; one streamed exec frame carries one output chunk.
 */
export const REPLY_LIMITS = { json: 1 << 20, exec: EXEC_ANSWER_LIMIT, frame: 4 << 20, shellMessage: 1 << 20 } as const;

export function where(ep: AgentEndpoint): string {
  return ep.socket ? `${ep.socket} (vsock ${ep.port})` : ep.cid ? `vsock ${ep.cid}:7475` : `${ep.host}:${ep.port}`;
}

/** Transport failures (refused, reset, timed out) mean the agent is unavailable: 503. */
export function unavailable(ep: AgentEndpoint, err: Error): AgentUnavailableError {
  return new AgentUnavailableError(
    `guest agent at ${where(ep)} unavailable: ${(err as NodeJS.ErrnoException).code ?? err.message}`,
  );
}

/** The caller's mistakes the agent reports pass through by their code; anything else is the agent's failure. */
const PASS_THROUGH: Partial<Record<ErrorCode, new (message: string) => Error>> = {
  invalid_argument: InvalidArgumentError,
  invalid_state: InvalidStateError,
  not_found: NotFoundError,
  already_exists: AlreadyExistsError,
  not_supported: NotSupportedError,
  payload_too_large: PayloadTooLargeError,
  insufficient_storage: InsufficientStorageError,
  resource_exhausted: ResourceExhaustedError,
};

/**
 * Maps an agent error reply by its `{error, code}` body, not its status: a known caller-side code
 * passes through; other codes, a missing code and garbage are the agent's failure (502).
 */
export function fromStatus(status: number, text: string): Error {
  let body: { error?: unknown; code?: unknown } = {};
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    body = undefined as never;
  }
  // `null`, a number, an array: not an error object either (found by the reply fuzz target).
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return new AgentFailureError(
      `guest agent answered ${status} without a JSON error: ${JSON.stringify(text.slice(0, 200))}`,
    );
  }
  const msg = typeof body.error === 'string' ? body.error.slice(0, 2000) : `status ${status}`;
  const Pass = typeof body.code === 'string' ? PASS_THROUGH[body.code as ErrorCode] : undefined;
  return Pass ? new Pass(msg) : new AgentFailureError(`guest agent failed (${status}): ${msg}`);
}
