import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { connect } from 'node:net';

export interface Target {
  socketPath?: string;
  host?: string;
  port?: number;
  token?: string;
}

export interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  json: any;
}

/** A small HTTP client over a Unix socket or TCP, for tests. Bodies that are objects go as JSON. */
export function call(
  t: Target,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const h: Record<string, string> = { ...headers };
    if (t.token && h.authorization === undefined) h.authorization = `Bearer ${t.token}`;
    let payload: Buffer | undefined;
    if (body !== undefined) {
      payload = Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
      h['content-type'] ??= 'application/json';
      h['content-length'] = String(payload.length);
    }
    const req = httpRequest(
      { socketPath: t.socketPath, host: t.host ?? '127.0.0.1', port: t.port, method, path, headers: h },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve(toReply(res.statusCode ?? 0, res.headers, Buffer.concat(chunks))));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/** A Reply from an answer's status, headers and body (`json` when the body parses). */
export function toReply(status: number, headers: IncomingHttpHeaders, body: Buffer): Reply {
  const text = body.toString('utf8');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status, headers, text, json };
}

export function ndjson(text: string): Record<string, unknown>[] {
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** A query string from an object; arrays become repeated keys (`args=a&args=b`). */
export function qs(o: Record<string, string | string[]>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(o)) for (const x of Array.isArray(v) ? v : [v]) p.append(k, x);
  return p.toString();
}

/**
 * Follows an NDJSON stream: every line as it comes goes to `lines`; `until` resolves with the
 * first line `match` accepts, and `close` ends the stream.
 */
export function followNdjson(
  t: Target,
  path: string,
): {
  lines: Record<string, unknown>[];
  until(match: (l: Record<string, unknown>) => boolean, ms: number): Promise<Record<string, unknown>>;
  close(): void;
} {
  const lines: Record<string, unknown>[] = [];
  const waiters: (() => void)[] = [];
  let buf = '';
  const req = httpRequest(
    {
      socketPath: t.socketPath,
      host: t.host ?? '127.0.0.1',
      port: t.port,
      path,
      headers: t.token ? { authorization: `Bearer ${t.token}` } : {},
    },
    (res) => {
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        buf += d;
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          lines.push(JSON.parse(buf.slice(0, nl)) as Record<string, unknown>);
          buf = buf.slice(nl + 1);
        }
        for (const w of waiters.splice(0)) w();
      });
    },
  );
  req.on('error', () => undefined);
  req.end();
  return {
    lines,
    async until(match, ms) {
      const deadline = Date.now() + ms;
      for (;;) {
        const hit = lines.find(match);
        if (hit) return hit;
        if (Date.now() > deadline) throw new Error(`no matching line within ${ms} ms (${lines.length} lines)`);
        await new Promise<void>((r) => {
          waiters.push(r);
          setTimeout(r, 100);
        });
      }
    },
    close: () => req.destroy(),
  };
}

/**
 * Writes one raw request head (as given, whatever a client library would refuse to send) to
 * 127.0.0.1:`port`; resolves with the answer's first line, or '' when the connection closed
 * without one (or nothing came within `ms`).
 */
export function rawRequest(port: number, head: string, ms = 5_000): Promise<string> {
  return new Promise((resolve) => {
    let got = '';
    const s = connect(port, '127.0.0.1', () => s.write(head));
    s.setEncoding('latin1');
    s.on('data', (c: string) => {
      got += c;
      if (got.includes('\r\n')) s.destroy();
    });
    s.on('error', () => undefined);
    s.on('close', () => resolve(got.split('\r\n')[0]));
    setTimeout(() => s.destroy(), ms);
  });
}
