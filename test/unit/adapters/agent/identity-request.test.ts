import { expect } from 'chai';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { IDENTITY_BODY_MAX, identityFirst } from '../../../../src/adapters/agent/identity-request.js';
import { InvalidArgumentError } from '../../../../src/domain/errors.js';

interface Answer {
  status: number;
  body: string;
  connection?: string;
}

describe('adapters/agent/identity-request', () => {
  let server: Server;
  let port: number;
  let given: unknown[];
  let passed: string[];

  before(async () => {
    server = createServer(
      identityFirst(
        async (body) => {
          const b = body as { hostname?: unknown };
          if (typeof b?.hostname !== 'string') throw new InvalidArgumentError('hostname must be a valid host name');
          given.push(body);
        },
        (req, res) => {
          passed.push(`${req.method} ${req.url}`);
          res.writeHead(418).end();
        },
      ),
    );
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    port = (server.address() as AddressInfo).port;
  });
  after(() => new Promise<void>((r) => server.close(() => r())));
  beforeEach(() => {
    given = [];
    passed = [];
  });

  const send = (
    method: string,
    path: string,
    body?: string | Buffer,
    headers: Record<string, string> = { 'content-type': 'application/json' },
  ) =>
    new Promise<Answer>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, method, path, headers, agent: false }, (res) => {
        let text = '';
        res
          .setEncoding('utf8')
          .on('data', (c: string) => {
            text += c;
          })
          .on('end', () => resolve({ status: res.statusCode ?? 0, body: text, connection: res.headers.connection }));
      });
      req.on('error', reject);
      req.end(body);
    });

  it('answers POST /identity itself with 204 and hands the parsed body over', async () => {
    const r = await send('POST', '/identity', JSON.stringify({ hostname: 'web-1', time_ms: 5 }), {
      'content-type': 'application/json; charset=utf-8',
    });
    expect(r.status).to.equal(204);
    expect(given).to.deep.equal([{ hostname: 'web-1', time_ms: 5 }]);
    expect(passed).to.deep.equal([]);
  });

  it('passes every other request on', async () => {
    for (const [m, p] of [
      ['GET', '/identity'],
      ['POST', '/identity?x=1'],
      ['POST', '/exec'],
      ['GET', '/health'],
    ]) {
      expect((await send(m, p, m === 'POST' ? '{}' : undefined)).status).to.equal(418);
    }
    expect(passed).to.deep.equal(['GET /identity', 'POST /identity?x=1', 'POST /exec', 'GET /health']);
    expect(given).to.deep.equal([]);
  });

  it('answers bad bodies as the express app would: 400 and 413 with {error, code}', async () => {
    const cases: [string | Buffer, Record<string, string>, number, RegExp][] = [
      ['{"hostname": ', { 'content-type': 'application/json' }, 400, /^invalid JSON body: /],
      ['hostname=web', { 'content-type': 'application/x-www-form-urlencoded' }, 400, /must be application\/json/],
      ['{}', {}, 400, /must be application\/json/],
      ['{"time_ms": 1}', { 'content-type': 'application/json' }, 400, /hostname must be/],
      [
        Buffer.alloc(IDENTITY_BODY_MAX + 1, 0x20),
        { 'content-type': 'application/json' },
        413,
        new RegExp(`larger than ${IDENTITY_BODY_MAX} bytes`),
      ],
    ];
    for (const [body, headers, status, error] of cases) {
      const r = await send('POST', '/identity', body, headers);
      expect(r.status, String(body).slice(0, 20)).to.equal(status);
      const parsed = JSON.parse(r.body) as { error: string; code: string };
      expect(parsed.error).to.match(error);
      expect(parsed.code).to.equal(status === 413 ? 'payload_too_large' : 'invalid_argument');
    }
    expect(given).to.deep.equal([]);
  });

  it('cuts off a body that grows past the limit without a declared length, and closes the connection', async () => {
    const r = await send('POST', '/identity', Buffer.alloc(IDENTITY_BODY_MAX * 4, 0x20), {
      'content-type': 'application/json',
      'transfer-encoding': 'chunked',
    });
    expect(r.status).to.equal(413);
    expect(r.connection).to.equal('close');
  });
});
