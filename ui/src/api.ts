/** The daemon's API as the dashboard calls it: same origin, the session in its header, JSON in and out. */

const SESSION_KEY = 'svc.session';

/**
 * The log-in session the daemon gave this page, kept in the origin's storage: unlike a cookie it
 * is not sent to, or readable from, any other port of the same host (a guest's forwarded app).
 */
export const session = {
  get: (): string | null => localStorage.getItem(SESSION_KEY),
  set: (id: string) => localStorage.setItem(SESSION_KEY, id),
  clear: () => localStorage.removeItem(SESSION_KEY),
  /** The headers that carry it. */
  headers(): Record<string, string> {
    const id = this.get();
    return id ? { 'x-svc-session': id } : {};
  },
  /** The WebSocket subprotocols that carry it (a page cannot set a WebSocket's headers). */
  protocols(): string[] {
    const id = this.get();
    return id ? ['svc', `svc-session.${id}`] : ['svc'];
  },
};

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code?: string,
  ) {
    super(message);
  }
}

type Listener = () => void;
const unauthenticated = new Set<Listener>();

/** Called whenever the daemon answers 401 (the session expired or was logged out elsewhere). */
export function onUnauthenticated(l: Listener): () => void {
  unauthenticated.add(l);
  return () => unauthenticated.delete(l);
}

async function failure(res: Response): Promise<ApiError> {
  if (res.status === 401) {
    session.clear();
    for (const l of unauthenticated) l();
  }
  const text = await res.text().catch(() => '');
  try {
    const body = JSON.parse(text) as { error?: string; code?: string };
    return new ApiError(res.status, body.error ?? `${res.status} ${res.statusText}`, body.code);
  } catch {
    return new ApiError(res.status, text.slice(0, 300) || `${res.status} ${res.statusText}`);
  }
}

export interface CallOptions {
  body?: unknown;
  /** Raw bytes (uploads) instead of JSON. */
  raw?: Blob;
  signal?: AbortSignal;
  accept?: string;
  /** Told of the answer before its body is read (its headers). */
  onResponse?: (res: Response) => void;
}

export async function request(method: string, path: string, o: CallOptions = {}): Promise<Response> {
  const headers: Record<string, string> = session.headers();
  let body: BodyInit | undefined;
  if (o.raw !== undefined) {
    headers['content-type'] = 'application/octet-stream';
    body = o.raw;
  } else if (o.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(o.body);
  }
  if (o.accept) headers.accept = o.accept;
  const res = await fetch(path, {
    method,
    headers,
    body,
    credentials: 'omit',
    signal: o.signal,
    cache: 'no-store',
  });
  if (!res.ok) throw await failure(res);
  return res;
}

/**
 * Saves what GET `path` answers as a file named `filename`. Fetched with the session's header
 * (a plain link could not carry it) and handed to the browser as a blob.
 */
export async function download(path: string, filename: string): Promise<void> {
  const blob = await (await request('GET', path)).blob();
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** A JSON call; 204 gives undefined. */
export async function api<T = unknown>(method: string, path: string, o: CallOptions = {}): Promise<T> {
  const res = await request(method, path, o);
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}

/** An NDJSON stream (create progress, the change feed), one object a line. */
export async function* ndjson<T = Record<string, unknown>>(
  method: string,
  path: string,
  o: CallOptions = {},
): AsyncGenerator<T> {
  const res = await request(method, path, { ...o, accept: 'application/x-ndjson' });
  o.onResponse?.(res);
  if (!res.body) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) yield JSON.parse(line) as T;
    }
  }
}

export const enc = encodeURIComponent;

// The API's shapes are the daemon's own (type-only imports: nothing of the daemon is bundled).
export type { Instance } from '../../src/domain/vm.js';
export type { CreateProgressEvent as ProgressEvent, VmEvent } from '../../src/domain/events.js';
export type { FsInfo } from '../../src/domain/agent.js';
export type { EgressEvent, EgressPolicy } from '../../src/domain/egress.js';
export type { EgressSecretBinding } from '../../src/domain/egress-secrets.js';
export type { OutputFrame, ProcessInfo } from '../../src/domain/processes.js';
export type { NodeView } from '../../src/domain/cluster.js';
export type { DrainResult } from '../../src/domain/move.js';
