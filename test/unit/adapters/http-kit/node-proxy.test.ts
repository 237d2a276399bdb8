import { expect } from 'chai';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { proxyRequest } from '../../../../src/adapters/http-kit/node-proxy.js';

/** Listens on a loopback port; resolves with its URL. */
async function listen(s: Server): Promise<string> {
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

/** A POST to `url`; resolves with the status and the whole body. */
function post(url: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST' }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.end('{}');
  });
}

describe('proxyRequest after lines of its own', () => {
  const servers: Server[] = [];
  afterEach(async () => {
    for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
  });

  /** A front that writes `first` itself, then sends the call on to a target answering `status` with `body`. */
  async function front(status: number, body: string, first?: string) {
    const target = createServer((_req, res) => {
      res.writeHead(status, { 'content-type': status < 400 ? 'application/x-ndjson' : 'application/json' });
      res.end(body);
    });
    const url = await listen(target);
    let proxied: number | undefined;
    const f = createServer((req, res) => {
      if (first !== undefined) {
        res.writeHead(200, { 'content-type': 'application/x-ndjson' });
        res.write(first);
      }
      void proxyRequest(req, res, { url, headers: {} }, Buffer.from('{}'), (s, text) => `error ${s} ${text}\n`).then(
        (s) => (proxied = s),
      );
    });
    servers.push(target, f);
    return { url: await listen(f), proxied: () => proxied };
  }

  it("passes the answer's head and body on when nothing was written before", async () => {
    const f = await front(201, '{"a":1}\n');
    expect(await post(f.url)).to.deep.equal({ status: 201, text: '{"a":1}\n' });
    expect(f.proxied()).to.equal(201);
  });

  it("puts the answer's body after the lines written first, under their head", async () => {
    const f = await front(200, 'two\nthree\n', 'one\n');
    expect(await post(f.url)).to.deep.equal({ status: 200, text: 'one\ntwo\nthree\n' });
  });

  it('puts an error answer after the lines in the words the caller gives, and resolves with its status', async () => {
    const f = await front(409, '{"error":"taken"}', 'one\n');
    expect(await post(f.url)).to.deep.equal({ status: 200, text: 'one\nerror 409 {"error":"taken"}\n' });
    expect(f.proxied()).to.equal(409);
  });
});
