import type { IncomingMessage } from 'node:http';
import type { Request, Response } from 'express';
import { SEND_RAW, type RawSendable } from '../../ports/guest-agent.js';

export type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

/** One route: express path syntax (`/vms/:name`), handler, and its OpenAPI summary. */
export interface RouteDef {
  method: Method;
  path: string;
  handler: (req: Request, res: Response) => Promise<void> | void;
  /** `raw` leaves the body unread for the handler to stream (exec stdin, cp); `json` reads JSON (a PUT). Default: JSON on POST/DELETE. */
  body?: 'json' | 'raw';
  /** `none`: served without the token (health, the dashboard's files and log-in). Default: bearer auth. */
  auth?: 'none';
}

/** `/vms/:name` -> `/vms/{name}` (OpenAPI form). */
export function toOpenApiPath(path: string): string {
  return path.replace(/:([A-Za-z]+)/g, '{$1}');
}

export function pathMatcher(path: string): RegExp {
  const body = path
    .split('/')
    .map((seg) => (seg.startsWith(':') ? '[^/]+' : seg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('/');
  return new RegExp(`^${body}/?$`);
}

/** A request carries a body when it says so; an exec without one gets an empty stdin. */
export function hasBody(req: IncomingMessage): boolean {
  return Number(req.headers['content-length'] ?? 0) > 0 || req.headers['transfer-encoding'] !== undefined;
}

/**
 * Answers with a download (cp): the type comes from what was asked (a file or a tar), never from
 * the guest, and the browser is told not to sniff or render it (a guest could otherwise serve a
 * page under the daemon's origin). Length when known; torn down if either side goes. A body that
 * can move its bytes to the connection itself ([SEND_RAW]) is offered it once the head is out.
 */
export function sendStream(
  res: Response,
  out: { name: string; tar: boolean; size?: number; body: import('node:stream').Readable },
): void {
  res.status(200).type(out.tar ? 'application/x-tar' : 'application/octet-stream');
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('Content-Disposition', attachment(out.tar ? `${out.name || 'root'}.tar` : out.name || 'download'));
  res.setHeader('Content-Security-Policy', "default-src 'none'; sandbox");
  if (out.size !== undefined) res.setHeader('Content-Length', String(out.size));
  out.body.on('error', () => res.destroy());
  res.on('close', () => out.body.destroy());
  // The caller left while the answer was being made: its close has fired already.
  if (res.destroyed) return void out.body.destroy();
  const raw = (out.body as Partial<RawSendable>)[SEND_RAW];
  if (!raw || !res.socket || out.size === undefined) return void out.body.pipe(res);
  res.flushHeaders();
  raw.call(out.body, res.socket).then(
    (sent) => {
      if (sent) res.end();
      else out.body.pipe(res);
    },
    () => res.destroy(),
  );
}

/** `attachment` with an ASCII fallback name and the exact one in RFC 5987 form. */
export function attachment(name: string): string {
  const ascii = name.replace(/[^\x20-\x7e]|["\\]/g, '_');
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(name)}`;
}
