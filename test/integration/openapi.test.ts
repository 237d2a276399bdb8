import { expect } from 'chai';
import { validate } from '@readme/openapi-parser';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { PLANNED } from '../../src/adapters/http/openapi.js';
import { toOpenApiPath } from '../../src/adapters/http-kit/route.js';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.js';

describe('OpenAPI description', function () {
  this.timeout(20000);
  let d: TestDaemon;
  before(async () => {
    d = await startTestDaemon();
  });
  after(async () => {
    await d.stop();
  });

  it('is a valid OpenAPI 3 document, version 0.2.2', async () => {
    const doc = parse((await d.call('GET', '/openapi.yaml')).text);
    expect(doc.info.version).to.equal('0.2.2');
    const result = await validate(structuredClone(doc));
    expect(result.valid, JSON.stringify((result as { errors?: unknown }).errors ?? [], null, 1)).to.equal(true);
  });

  it('lists exactly the routes the daemon serves, plus the marked planned ones', async () => {
    const doc = parse((await d.call('GET', '/openapi.yaml')).text);
    const described = new Set<string>();
    const planned = new Set<string>();
    const cluster = new Set<string>();
    for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, Record<string, unknown>>>)) {
      for (const [method, o] of Object.entries(ops)) {
        (o['x-svc-planned'] ? planned : o['x-svc-cluster'] ? cluster : described).add(`${method} ${path}`);
      }
    }
    // A node of a cluster serves these too (test/integration/cluster.test.ts); this daemon is none.
    expect([...cluster].sort()).to.deep.equal([
      'delete /nodes/{node}/drain',
      'get /cluster/images/{id}',
      'get /cluster/images/{id}/files/{file}',
      'get /nodes',
      'get /nodes/{node}',
      'post /cluster/images/{id}/fetch',
      'post /nodes/{node}/drain',
      'post /vms/{name}/move',
      'put /cluster/vms/{name}',
    ]);
    // E2B's API is E2B's, described by E2B's own documents (docs/e2b.md), not svc's: under /e2b,
    // and its signed file URLs at /files (where its SDK puts them).
    const e2b = (path: string) => path.startsWith('/e2b/') || path === '/files';
    const served = new Set(
      d.daemon.routes.filter((r) => !e2b(r.path)).map((r) => `${r.method} ${toOpenApiPath(r.path)}`),
    );
    expect(d.daemon.routes.some((r) => r.path.startsWith('/e2b/'))).to.equal(true);
    expect([...described].sort()).to.deep.equal([...served].sort());
    expect([...planned].sort()).to.deep.equal([...PLANNED].sort());
    for (const p of planned) expect(served.has(p), `${p} is served but still marked planned`).to.equal(false);
  });

  it('every call the dashboard makes is to a route the daemon serves (or a node of a cluster does)', async () => {
    const dir = join(process.cwd(), 'ui', 'src');
    const calls: string[] = [];
    for (const f of readdirSync(dir).filter((n) => n.endsWith('.ts'))) {
      const text = readFileSync(join(dir, f), 'utf8');
      for (const m of text.matchAll(
        /\b(?:api|request|ndjson)(?:<.*?>)?\('(GET|POST|PUT|DELETE|PATCH)',\s*(['`])(.*?)\2/g,
      ))
        calls.push(`${m[1]} ${m[3]}`);
      for (const m of text.matchAll(/new WebSocket\(`\$\{proto\}\/\/\$\{location\.host\}(.*?)`/g))
        calls.push(`GET ${m[1]}`);
    }
    expect(calls.length, 'the dashboard calls found').to.be.above(20);
    // A template's ${...} is one path segment; the query is not part of the route.
    const segments = (p: string) =>
      p
        .split('?')[0]
        .replace(/\$\{[^}]*\}/g, '*')
        .split('/');
    // The calls a VM's page makes on a node of a cluster (a move: test/integration/cluster.test.ts)
    // are to the routes the document marks as a node's.
    const doc = parse((await d.call('GET', '/openapi.yaml')).text);
    const nodeRoutes = Object.entries(doc.paths as Record<string, Record<string, Record<string, unknown>>>).flatMap(
      ([path, ops]) =>
        Object.entries(ops)
          .filter(([, o]) => o['x-svc-cluster'])
          .map(([method]) => ({ method, path: path.replace(/\{(\w+)\}/g, ':$1') })),
    );
    const served = [...d.daemon.routes, ...nodeRoutes].map((r) => ({
      method: r.method.toUpperCase(),
      parts: r.path.split('/'),
    }));
    const fits = (call: string) => {
      const [method, path] = call.split(' ');
      const parts = segments(path);
      return served.some(
        (r) =>
          r.method === method &&
          r.parts.length === parts.length &&
          r.parts.every((x, i) => x.startsWith(':') || parts[i] === '*' || x === parts[i]),
      );
    };
    expect(calls.filter((c) => !fits(c))).to.deep.equal([]);
  });
});
