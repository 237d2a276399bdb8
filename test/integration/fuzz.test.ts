import { expect } from 'chai';
import fc from 'fast-check';
import { parse } from 'yaml';
import { request } from 'node:http';
import { rawRequest, toReply, type Reply } from '../helpers/http.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

interface Op {
  method: string;
  path: string;
  params: { name: string; in: string }[];
  fiveXX: string[];
}

const RUNS = Number(process.env.SVC_FUZZ_RUNS ?? 25);
const SEED = Number(process.env.SVC_FUZZ_SEED ?? Date.now() % 2 ** 31);

/** A value for a path parameter: the real VM, missing names, and hostile text. */
const pathValue = fc.oneof(
  fc.constantFrom(
    'fz',
    'nope',
    'a'.repeat(300),
    '..',
    '%2e%2e',
    '%00',
    'NUL%00x',
    '%F0%9F%92%A9',
    'x%2Fy',
    '%zz',
    '%E0%A4%A',
    '8080',
    '0',
    '-1',
    '99999999',
  ),
  fc.string({ maxLength: 40 }).map(encodeURIComponent),
);
const text = fc.oneof(
  fc.string({ maxLength: 60 }),
  fc.constantFrom('', '0', '-1', 'true', '1e309', 'NaN', '\u0000', '/etc/passwd', '../../x', 'a'.repeat(5000), '💩'),
);
/** Bodies: JSON of any shape, deep, huge, with duplicate keys or NULs, not JSON at all, binary. */
const body = fc.oneof(
  fc.constant(undefined),
  fc
    .jsonValue({ maxDepth: 4 })
    .map((v) => ({ type: 'application/json', data: Buffer.from(JSON.stringify(v) ?? 'null') })),
  fc
    .record(
      {
        name: fc.oneof(fc.constant('fz2'), text),
        value: text,
        image: text,
        from: text,
        cpus: fc.oneof(fc.integer(), text),
        persistent: fc.anything(),
      },
      { requiredKeys: [] },
    )
    .map((v) => ({ type: 'application/json', data: Buffer.from(JSON.stringify(v)) })),
  fc
    .constantFrom(
      '{"name":"a","name":"b"}',
      '{"name":"a\\u0000b"}',
      '[',
      '{"__proto__":{"x":1}}',
      '{"constructor":{"prototype":{}}}',
      'null',
      '""',
      `${'['.repeat(20_000)}${']'.repeat(20_000)}`,
      `{"name":"${'x'.repeat(2 * 1024 * 1024)}"}`,
    )
    .map((s) => ({ type: 'application/json', data: Buffer.from(s) })),
  fc.uint8Array({ maxLength: 512 }).map((b) => ({
    type: fc.sample(
      fc.constantFrom('application/octet-stream', 'text/plain', 'application/json', 'application/x-tar'),
      1,
    )[0],
    data: Buffer.from(b),
  })),
);

/**
 * One request; an answer that is still streaming after 0.5 s (the event feed, a followed log, a
 * long create) is cut off by the client and judged by its status, which is what a caller would have
 * seen. Refusals (what the body is read for) end at once. At 3 s, `/events` alone took 75 s.
 */
function fuzzCall(
  socketPath: string,
  method: string,
  path: string,
  body: Buffer | undefined,
  headers: Record<string, string>,
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const h: Record<string, string> = { authorization: 'Bearer test-token', ...headers };
    if (body) h['content-length'] = String(body.length);
    const req = request({ socketPath, method, path, headers: h }, (res) => {
      const parts: Buffer[] = [];
      let size = 0;
      const done = () => {
        clearTimeout(cut);
        resolve(toReply(res.statusCode ?? 0, res.headers, Buffer.concat(parts)));
      };
      const cut = setTimeout(() => {
        res.destroy();
        done();
      }, 500);
      res.on('data', (c: Buffer) => {
        if ((size += c.length) <= 1 << 16) parts.push(c);
      });
      res.on('end', done);
      res.on('error', done);
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** Every route of the OpenAPI document driven with random paths, queries, headers and bodies. */
describe('API fuzzing from the OpenAPI document (fast-check)', function () {
  this.timeout(600_000);
  let d: TestDaemon;
  let ops: Op[];
  before(async () => {
    d = await startTestDaemon({ max_vms: 20, sandbox_metrics_enabled: false });
    const doc = parse((await d.call('GET', '/openapi.yaml')).text) as {
      paths: Record<string, Record<string, { parameters?: Op['params']; responses: Record<string, unknown> }>>;
    };
    ops = Object.entries(doc.paths).flatMap(([path, byMethod]) =>
      Object.entries(byMethod).map(([method, o]) => ({
        method: method.toUpperCase(),
        path,
        params: o.parameters ?? [],
        fiveXX: Object.keys(o.responses).filter((c) => c.startsWith('5')),
      })),
    );
  });
  after(async () => d.stop());

  /** What a refused request must leave as it was. */
  const state = async () =>
    JSON.stringify(
      await Promise.all(
        ['/vms', '/secrets', '/images'].map(async (p) => {
          const items = (await d.call('GET', p)).json as Record<string, unknown>[];
          return items
            .map((i) => `${String(i.name ?? i.id)}:${String(i.status ?? '')}:${String(i.updated_at ?? '')}`)
            .sort();
        }),
      ),
    );

  it('never answers a 5xx the document does not list, never crashes, and changes nothing on a 4xx', async () => {
    const seen: Record<string, number> = {};
    let requests = 0;
    for (const op of ops) {
      const queryKeys = op.params.filter((p) => p.in === 'query').map((p) => p.name);
      const query = fc.array(
        fc.tuple(
          fc.oneof(fc.constantFrom(...(queryKeys.length ? queryKeys : ['x'])), fc.string({ maxLength: 12 })),
          text,
        ),
        { maxLength: 6 },
      );
      await fc.assert(
        fc.asyncProperty(
          fc.array(pathValue, { minLength: 4, maxLength: 4 }),
          query,
          body,
          fc.constantFrom(undefined, 'svc', 'evil.example'),
          async (values, q, b, host) => {
            if ((await d.call('GET', '/vms/fz')).status === 404)
              await d.call('POST', '/vms', { name: 'fz', persistent: true });
            let i = 0;
            let url = op.path.replace(/\{[^}]+\}/g, () => values[i++]);
            // exec runs nothing in a fake VM without an agent; the query stays hostile anyway
            if (q.length) url += `?${q.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&')}`;
            const before = await state();
            const headers: Record<string, string> = {};
            if (host) headers.host = host;
            if (b) headers['content-type'] = b.type;
            let r: Reply;
            try {
              r = await fuzzCall(d.config.socket, op.method, url, b?.data, headers);
            } catch (err) {
              // a connection the daemon closed on purpose (body too large) is fine; the daemon must live
              r = { status: 0, headers: {}, text: String(err), json: undefined };
            }
            requests++;
            seen[`${op.method} ${op.path} ${r.status}`] = (seen[`${op.method} ${op.path} ${r.status}`] ?? 0) + 1;
            expect((await d.call('GET', '/healthz')).status, 'the daemon is alive').to.equal(200);
            if (r.status >= 500)
              expect(op.fiveXX, `${op.method} ${url} -> ${r.status} ${r.text.slice(0, 300)}`).to.include(
                String(r.status),
              );
            if (r.status >= 400 && r.status < 500) {
              // /mcp speaks JSON-RPC: its errors are {jsonrpc, error: {code, message}}
              const e = (r.json as { error?: unknown } | undefined)?.error;
              expect(
                typeof e === 'string' || (op.path === '/mcp' && typeof e === 'object' && e !== null),
                `${op.method} ${url} -> ${r.status} has an {error}: ${r.text.slice(0, 200)}`,
              ).to.equal(true);
              expect(await state(), `${op.method} ${url} -> ${r.status} changed state`).to.equal(before);
            }
          },
        ),
        { numRuns: RUNS, seed: SEED, endOnFailure: true },
      );
    }
    expect(requests).to.be.at.least(ops.length * RUNS);
    console.log(`      fuzz: ${requests} requests over ${ops.length} operations, seed ${SEED}`);
  });

  /**
   * What Node's HTTP parser lets through but no route sees the way a client library sends it: absolute
   * and malformed request targets, odd methods, WebSocket and port upgrades, with and without the
   * token, written raw on the TCP listener. The upgrade handlers run outside express; one such
   * request once stopped the daemon.
   */
  it('survives raw request lines and upgrades: every one answered below 500 or refused, the daemon alive', async () => {
    const port = d.tcp.port!;
    const segment = fc.oneof(
      fc.constantFrom('vms', 'nope', 'shell', 'ports', '8080', 'exec', 'processes', 'images', 'e2b', 'ui', 'mcp'),
      fc.constantFrom('%zz', '%', '%E0%A4%A', '%00', '..', '', '[', ']', '@', ':', '%2F', 'a'.repeat(300)),
      fc.string({ maxLength: 8 }).map(encodeURIComponent),
    );
    const target = fc.tuple(
      fc.constantFrom('', 'http://[', 'http://[::1', 'http://%zz', 'http://x:99999', 'http://127.0.0.1', 'svc://a'),
      fc.array(segment, { minLength: 1, maxLength: 5 }),
      fc.constantFrom('', '?', '?cols=%zz', '?port=99999', '?token=x', '?a=%'),
    );
    const raw = (head: string) => rawRequest(port, head, 3_000);
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('GET', 'POST', 'DELETE', 'PUT', 'OPTIONS', 'HEAD', 'PATCH'),
        target,
        fc.constantFrom('', 'websocket', 'svc-port', 'h2c'),
        fc.boolean(),
        async (method, [prefix, segments, query], upgrade, token) => {
          const url = `${prefix}/${segments.join('/')}${query}`;
          const head =
            `${method} ${url} HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\n` +
            (token ? `authorization: Bearer ${d.config.api_token}\r\n` : '') +
            (upgrade
              ? `connection: upgrade\r\nupgrade: ${upgrade}\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n`
              : '') +
            'content-length: 0\r\n\r\n';
          const line = await raw(head);
          n++;
          expect((await d.call('GET', '/healthz')).status, `alive after ${method} ${url} (${upgrade})`).to.equal(200);
          const status = Number(/^HTTP\/1\.1 (\d{3}) /.exec(line)?.[1] ?? 0);
          // No answer at all is a connection closed on purpose; a 101 an upgrade taken (no VM here has one).
          if (status) expect(status, `${method} ${url} (${upgrade}) -> ${line}`).to.be.below(500);
        },
      ),
      { numRuns: RUNS * 12, seed: SEED, endOnFailure: true },
    );
    console.log(`      raw: ${n} request lines, seed ${SEED}`);
  });
});
