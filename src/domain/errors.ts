/**
 * Domain errors carry a stable string `code` and no transport status. Exactly one mapping
 * from code to HTTP status lives in the HTTP adapter (adapters/http-kit/error-status.ts).
 */
export type ErrorCode =
  | 'invalid_argument'
  | 'invalid_state'
  | 'not_found'
  | 'already_exists'
  | 'resource_exhausted'
  | 'payload_too_large'
  | 'insufficient_storage'
  | 'unauthenticated'
  | 'permission_denied'
  | 'not_supported'
  | 'agent_unavailable'
  | 'unavailable'
  | 'agent_failure'
  | 'deadline_exceeded'
  | 'internal';

export abstract class DomainError extends Error {
  abstract readonly code: ErrorCode;
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** The caller sent something malformed: bad name, bad field, bad query value. */
export class InvalidArgumentError extends DomainError {
  readonly code = 'invalid_argument' as const;
}

/** The verb is not allowed from the VM's current status. The message names the verb to use. */
export class InvalidStateError extends DomainError {
  readonly code = 'invalid_state' as const;
}

export class NotFoundError extends DomainError {
  readonly code = 'not_found' as const;
}

export class AlreadyExistsError extends DomainError {
  readonly code = 'already_exists' as const;
}

/**
 * A configured cap (max_vms, max_cpus_total, max_memory_mb_total, max_execs_*) would be exceeded.
 * `retryAfterS` is set when waiting helps (a running call will end), not for a full host.
 */
export class ResourceExhaustedError extends DomainError {
  readonly code = 'resource_exhausted' as const;
  constructor(
    message: string,
    readonly retryAfterS?: number,
  ) {
    super(message);
  }
}

export class PayloadTooLargeError extends DomainError {
  readonly code = 'payload_too_large' as const;
}

/** A disk is full (the guest's, or the host's under the data dir): ENOSPC or EDQUOT. */
export class InsufficientStorageError extends DomainError {
  readonly code = 'insufficient_storage' as const;
}

/** Whether `err` is a file system's "no space left" (ENOSPC) or "quota exceeded" (EDQUOT). */
export function isNoSpace(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'ENOSPC' || code === 'EDQUOT';
}

export class UnauthenticatedError extends DomainError {
  readonly code = 'unauthenticated' as const;
}

/** The caller is known (or needs no token) but this request may not be served: a foreign Host or Origin. */
export class PermissionDeniedError extends DomainError {
  readonly code = 'permission_denied' as const;
}

/** The adapter in use cannot do this (for example vsock on a host without it). */
export class NotSupportedError extends DomainError {
  readonly code = 'not_supported' as const;
}

/**
 * The guest agent cannot be reached: VM not running, no endpoint, connect refused or timed out.
 * `retryAfterS` is set when the daemon itself is busy (its budget for guest answers is spent).
 */
export class AgentUnavailableError extends DomainError {
  readonly code = 'agent_unavailable' as const;
  constructor(
    message: string,
    readonly retryAfterS?: number,
  ) {
    super(message);
  }
}

/** What a call needs is out of reach for now: a cluster node that stopped renewing its lease, etcd without quorum. */
export class UnavailableError extends DomainError {
  readonly code = 'unavailable' as const;
}

/** The guest agent answered, but with garbage or a 5xx. */
export class AgentFailureError extends DomainError {
  readonly code = 'agent_failure' as const;
}

export class DeadlineExceededError extends DomainError {
  readonly code = 'deadline_exceeded' as const;
}

/**
 * A create that was accepted and then failed. Whatever failed it, that is the host's failure, not
 * the caller's: it keeps the cause's code and message, and the HTTP mapping answers 500 (504 when
 * the deadline passed, 507 when a disk was full).
 */
export class AcceptedCreateFailedError extends DomainError {
  readonly code: ErrorCode;
  constructor(override readonly cause: DomainError) {
    super(cause.message);
    this.code = cause.code;
  }
}

/** Something on the host failed (hypervisor, disk). Not the caller's fault. */
export class InternalError extends DomainError {
  readonly code = 'internal' as const;
}

/**
 * How loud a failed operation is in the daemon's log: the host's own failures are errors, a guest
 * that cannot be reached or a deadline a warning, a caller's mistake (a bad value, a missing VM,
 * a cap) only information: a user who types a wrong flag should not page the operator.
 */
export function logLevelOf(err: DomainError): 'error' | 'warn' | 'info' {
  switch (err.code) {
    case 'internal':
    case 'agent_failure':
      return 'error';
    case 'agent_unavailable':
    case 'unavailable':
    case 'deadline_exceeded':
      return 'warn';
    default:
      return 'info';
  }
}

/** Every concrete domain error class, so a test can prove each one has a transport mapping. */
export const ALL_DOMAIN_ERRORS = [
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
  AlreadyExistsError,
  ResourceExhaustedError,
  PayloadTooLargeError,
  InsufficientStorageError,
  PermissionDeniedError,
  UnauthenticatedError,
  NotSupportedError,
  AgentUnavailableError,
  UnavailableError,
  AgentFailureError,
  DeadlineExceededError,
  InternalError,
] as const;

export function isDomainError(err: unknown): err is DomainError {
  return err instanceof DomainError;
}

/** Anything thrown as a domain error: itself, a full disk as one, anything else the host's failure. */
export function asDomainError(err: unknown): DomainError {
  if (isDomainError(err)) return err;
  if (isNoSpace(err)) return noSpaceError(err, 'the host');
  return new InternalError(errorMessage(err));
}

/** A full disk (`isNoSpace`) in words: `no space left on WHERE: ...` (`no space left: ...` without one). */
export function noSpaceError(err: unknown, where?: string): InsufficientStorageError {
  return new InsufficientStorageError(`no space left${where ? ` on ${where}` : ''}: ${errorMessage(err)}`);
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * A value as an error message shows it: short, and never walked (a body nested 400k deep would
 * overflow the stack of JSON.stringify and turn a 400 into a 500).
 */
export function shown(v: unknown): string {
  if (Array.isArray(v)) return 'an array';
  if (v !== null && typeof v === 'object') return 'an object';
  const text = JSON.stringify(v) ?? String(v);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}
