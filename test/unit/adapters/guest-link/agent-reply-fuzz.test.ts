import { expect } from 'chai';
import fc from 'fast-check';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { HttpGuestAgent } from '../../../../src/adapters/guest-link/http-guest-agent.js';
import { isDomainError } from '../../../../src/domain/errors.js';

/** What a hostile agent answers one call with. */
interface Reply {
  status: number;
  length: 'none' | 'true' | 'short' | 'long';
  body: Buffer;
  ending: 'end' | 'cut' | 'stall';
}

/** A body that prints as its first bytes and its size in a counterexample, not as megabytes of numbers. */
const shown = (b: Buffer): Buffer =>
  Object.assign(b, {
    [fc.toStringMethod]: () => `Buffer(${b.length}: ${JSON.stringify(b.subarray(0, 60).toString('latin1'))})`,
  });

const frame = fc.oneof(
  fc
    .record(
      {
        type: fc.constantFrom('started', 'stdout', 'stderr', 'exit', 'error', 'other'),
        t: fc.string(),
        data: fc.string(),
        exit_code: fc.oneof(fc.integer(), fc.string()),
      },
      { requiredKeys: ['type'] },
    )
    .map((f) => JSON.stringify(f)),
  fc.string({ maxLength: 40 }),
);
const body = fc.oneof(
  fc.constant(Buffer.alloc(0)),
  fc.jsonValue({ maxDepth: 3 }).map((v) => Buffer.from(JSON.stringify(v) ?? 'null')),
  fc.uint8Array({ maxLength: 2048 }).map((a) => Buffer.from(a)),
  fc.array(frame, { maxLength: 8 }).map((ls) => Buffer.from(ls.join('\n') + '\n')),
  fc
    .constantFrom('{"error":"x","code":"not_found"}', '{"error":"x","code":"internal"}', '{"status":"ok"}')
    .map((s) => Buffer.from(s)),
  // Larger than every small answer's cap (1 MiB), under the exec cap.
  fc.integer({ min: (1 << 20) + 1, max: 3 << 20 }).map((n) => Buffer.alloc(n, '[')),
);
const reply: fc.Arbitrary<Reply> = fc.record({
  status: fc.oneof(fc.constantFrom(200, 204, 400, 404, 409, 500, 502), fc.integer({ min: 200, max: 599 })),
  length: fc.constantFrom('none', 'true', 'short', 'long'),
  body: body.map(shown),
  ending: fc.constantFrom('end', 'end', 'cut', 'stall'),
});

function answer(res: ServerResponse, r: Reply): void {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  const n = r.body.length;
  if (r.length === 'true') headers['content-length'] = String(n);
  if (r.length === 'short' && n > 0) headers['content-length'] = String(n - 1);
  if (r.length === 'long') headers['content-length'] = String(n + 100);
  try {
    res.writeHead(r.status, headers);
  } catch {
    return void res.socket?.destroy();
  }
  if (r.ending === 'stall') return void res.write(r.body.subarray(0, n >> 1));
  if (r.ending === 'cut') {
    res.write(r.body.subarray(0, n >> 1));
    return void setTimeout(() => res.socket?.destroy(), 5);
  }
  if (r.length === 'short' || r.length === 'long') {
    res.write(r.body);
    return void setTimeout(() => res.socket?.destroy(), 5);
  }
  res.end(r.body);
}

describe('adapters/guest-link/HttpGuestAgent against agents fast-check makes up', function () {
  this.timeout(120_000);

  it('settles every call in bounded time with an answer or a domain error, never a crash', async () => {
    let next: Reply | undefined;
    const srv = createServer((_req, res) => {
      res.on('error', () => undefined);
      answer(res, next!);
    });
    srv.on('clientError', (_e, s) => s.destroy());
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const ep = { host: '127.0.0.1', port: (srv.address() as AddressInfo).port };
    const agent = new HttpGuestAgent();
    const history: string[] = [];
    // Calls with a short deadline of their own; a stalled answer is only tried on those.
    const calls = {
      health: () => agent.health(ep, 400),
      readiness: () => agent.readiness(ep),
      stats: () => agent.stats(ep),
      stat: () => agent.fs(ep, { op: 'stat', path: '/x' }),
      readdir: () => agent.fs(ep, { op: 'readdir', path: '/x' }),
      stream: async () => {
        const seen = [];
        for await (const f of agent.execStream(ep, { cmd: 'x', args: [] })) seen.push(f);
        return seen;
      },
    };
    try {
      await fc.assert(
        fc.asyncProperty(reply, fc.constantFrom(...(Object.keys(calls) as (keyof typeof calls)[])), async (r, call) => {
          if (r.ending === 'stall' && call !== 'health') r.ending = 'cut';
          next = r;
          history.push(
            `${call} ${r.status} ${r.length} ${r.ending} ${r.body.length}B ${JSON.stringify(r.body.subarray(0, 12).toString('latin1'))}`,
          );
          const t0 = Date.now();
          let timer: NodeJS.Timeout | undefined;
          const got = await Promise.race([
            calls[call]().then(
              (v) => ({ v }),
              (e: unknown) => ({ e }),
            ),
            new Promise<{ hung: true }>((r) => (timer = setTimeout(() => r({ hung: true }), 8000))),
          ]).finally(() => clearTimeout(timer));
          if ('hung' in got) expect.fail(`${call} never settled after ${history.slice(-4).join(' | ')}`);
          expect(Date.now() - t0, 'settled in time').to.be.below(6000);
          if ('e' in got) expect(isDomainError(got.e), `${call}: ${String(got.e)}`).to.equal(true);
          else if (call === 'stream') {
            // A stream that finished ended on its exit frame, and every frame is of a known type.
            const frames = got.v as { type: string }[];
            expect(frames.at(-1)?.type).to.equal('exit');
          }
        }),
        {
          numRuns: Number(process.env.SVC_FUZZ_RUNS ?? 60),
          ...(process.env.SVC_FUZZ_SEED ? { seed: Number(process.env.SVC_FUZZ_SEED) } : {}),
          ...(process.env.SVC_FUZZ_PATH ? { path: process.env.SVC_FUZZ_PATH } : {}),
        },
      );
    } finally {
      agent.close();
      srv.closeAllConnections();
      srv.close();
    }
  });
});
