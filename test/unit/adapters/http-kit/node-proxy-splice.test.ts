import { expect } from 'chai';
import { createHash, randomBytes } from 'node:crypto';
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { proxyRequest, type BodySplice } from '../../../../src/adapters/http-kit/node-proxy.js';
import { splice, spliceHelper, SPLICE_MIN_BYTES } from '../../../../src/adapters/process-kit/splice.js';

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

function listen(srv: Server): Promise<number> {
  return new Promise((r) => srv.listen(0, '127.0.0.1', () => r((srv.address() as AddressInfo).port)));
}

/** A GET of `port`/`path`: the status, the body, and whether the answer came whole ('aborted' when cut). */
function get(
  port: number,
  path: string,
): Promise<{ status: number; body: Buffer; connection?: string; cut?: boolean }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('error', () => undefined);
      res.on('close', () =>
        resolve({
          status: res.statusCode ?? 0,
          body: Buffer.concat(parts),
          connection: res.headers.connection,
          cut: !res.complete,
        }),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

/** A PUT of `body` to `port` (declared length, or chunked); the answer's status, headers and text. */
function put(
  port: number,
  path: string,
  body: Buffer,
  chunked = false,
): Promise<{ status: number; text: string; connection?: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'PUT',
        path,
        headers: chunked ? { 'transfer-encoding': 'chunked' } : { 'content-length': String(body.length) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text, connection: res.headers.connection }));
      },
    );
    req.on('error', reject);
    if (chunked) {
      for (let i = 0; i < body.length; i += 1 << 20) req.write(body.subarray(i, i + (1 << 20)));
      req.end();
    } else req.end(body);
  });
}

describe('adapters/http-kit proxyRequest: a large body moved socket to socket (splice helper)', function () {
  this.timeout(20000);
  const helper = spliceHelper();
  let moves = 0;
  const mover: BodySplice = {
    minBytes: SPLICE_MIN_BYTES,
    move: (source, dest, length) => {
      moves++;
      return splice(helper!, source, dest, length);
    },
    largeAnswers: (req) => req.method === 'GET',
  };
  /** Settles when the connection of the last GET /stall closes. */
  let stalled: Promise<void> | undefined;
  /** What GET /down?n=N answers: N bytes, the same for every N's prefix. */
  const download = randomBytes(SPLICE_MIN_BYTES * 3);
  let target: Server;
  let front: Server;
  let targetPort = 0;
  let frontPort = 0;
  /** What the target got last: the hop header, and whether it read the body. */
  let seen: { hop?: string; length?: number } = {};

  before(async () => {
    expect(helper, 'dist/native/svc-splice').to.be.a('string');
    target = createServer((req: IncomingMessage, res: ServerResponse) => {
      seen = { hop: req.headers['x-hop'] as string | undefined };
      if (req.url === '/refuse') return void res.writeHead(404, { 'content-type': 'text/plain' }).end('no such file');
      if (req.url === '/die') return void req.socket.destroy();
      if (req.url === '/stall') {
        // A large download that stops after its first bytes: only the caller leaving ends it.
        res.writeHead(200, { 'content-length': String(SPLICE_MIN_BYTES * 4) });
        res.write(download.subarray(0, 300_000));
        stalled = new Promise((r) => req.socket.once('close', () => r()));
        return;
      }
      const down = /^\/down\?n=(\d+)(&cut=1|&whole=1)?$/.exec(req.url ?? '');
      if (down) {
        const n = Number(down[1]);
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(n) });
        if (down[2] === '&cut=1') return void res.write(download.subarray(0, n >> 1), () => req.socket.destroy());
        if (down[2]) return void res.end(download.subarray(0, n));
        // In slices, some of them late, so the mover waits on the target and Node has read ahead a part.
        res.write(download.subarray(0, 300_000));
        return void setTimeout(() => res.end(download.subarray(300_000, n)), 50);
      }
      const parts: Buffer[] = [];
      req.on('data', (c: Buffer) => parts.push(c));
      req.on('end', () => {
        const got = Buffer.concat(parts);
        seen.length = got.length;
        res.writeHead(200, { 'content-type': 'text/plain' }).end(`${got.length} ${sha(got)}`);
      });
    });
    targetPort = await listen(target);
    front = createServer((req, res) => {
      proxyRequest(req, res, {
        url: `http://127.0.0.1:${targetPort}`,
        headers: { 'x-hop': 'front' },
        splice: mover,
      }).catch((err: Error) => {
        if (!res.headersSent) res.writeHead(502);
        res.end(`not answered: ${err.message}`);
      });
    });
    frontPort = await listen(front);
  });
  after(() => {
    front.close();
    target.close();
    front.closeAllConnections();
    target.closeAllConnections();
  });
  beforeEach(() => {
    moves = 0;
  });

  it('moves a body of a declared length whole and in order, with the target hop headers, and closes the connection after', async () => {
    const body = randomBytes(SPLICE_MIN_BYTES * 2 + 12345);
    const r = await put(frontPort, '/up', body);
    expect(r.status, r.text).to.equal(200);
    expect(r.text).to.equal(`${body.length} ${sha(body)}`);
    expect(moves).to.equal(1);
    expect(seen.hop).to.equal('front');
    expect(r.connection).to.equal('close');
  });

  it('sends a small body and a chunked one through Node, as before', async () => {
    const small = randomBytes(SPLICE_MIN_BYTES - 1);
    expect((await put(frontPort, '/small', small)).text).to.equal(`${small.length} ${sha(small)}`);
    const chunked = randomBytes(SPLICE_MIN_BYTES * 2);
    expect((await put(frontPort, '/chunked', chunked, true)).text).to.equal(`${chunked.length} ${sha(chunked)}`);
    expect(moves).to.equal(0);
  });

  it('moves a large download whole and in order after what Node had read, and closes the connection after', async () => {
    const n = SPLICE_MIN_BYTES * 2 + 4097;
    // In slices, and all at once (Node must not read on beside the mover once it has started).
    for (const how of ['', '&whole=1']) {
      const r = await get(frontPort, `/down?n=${n}${how}`);
      expect(r.status).to.equal(200);
      expect(r.cut, how).to.equal(false);
      expect(r.body.length).to.equal(n);
      expect(sha(r.body)).to.equal(sha(download.subarray(0, n)));
      expect(r.connection).to.equal('close');
    }
    expect(moves).to.equal(2);
  });

  it('sends a small download through Node, and a refusal of one as it came', async () => {
    const n = SPLICE_MIN_BYTES - 1;
    const r = await get(frontPort, `/down?n=${n}`);
    expect(sha(r.body)).to.equal(sha(download.subarray(0, n)));
    const refused = await get(frontPort, '/refuse');
    expect(refused.status).to.equal(404);
    expect(refused.body.toString()).to.equal('no such file');
    expect(moves).to.equal(0);
  });

  it('cuts the caller off when the target breaks off a large download, so a short copy never looks whole', async () => {
    const n = SPLICE_MIN_BYTES * 3;
    const r = await get(frontPort, `/down?n=${n}&cut=1`).catch(() => ({ cut: true, body: Buffer.alloc(0) }));
    expect(r.cut).to.equal(true);
    expect(r.body.length).to.be.below(n);
    expect(moves).to.equal(1);
  });

  it('stops moving a large download and closes the call when the caller leaves', async () => {
    await new Promise<void>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port: frontPort, path: '/stall' }, (res) => {
        res.once('data', () => {
          req.destroy();
          resolve();
        });
      });
      req.on('error', () => undefined);
      setTimeout(() => reject(new Error('no bytes of the download came')), 5000).unref();
      req.end();
    });
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      stalled,
      new Promise(
        (_, reject) => (timer = setTimeout(() => reject(new Error('the call to the target stayed open')), 5000)),
      ),
    ]).finally(() => clearTimeout(timer));
    expect(moves).to.equal(1);
  });

  it("relays the target's refusal of a body it did not read", async () => {
    const r = await put(frontPort, '/refuse', randomBytes(SPLICE_MIN_BYTES * 4));
    expect(r.status).to.equal(404);
    expect(r.text).to.equal('no such file');
    expect(moves).to.equal(1);
  });

  it('answers, and does not hang, when the target drops the connection during the body', async () => {
    const r = await put(frontPort, '/die', randomBytes(SPLICE_MIN_BYTES * 4)).catch((err: Error) => ({
      status: 0,
      text: err.message,
    }));
    // The front answers that the target did not (502 here), or the client is cut off: never a success.
    expect(r.status, r.text).to.not.equal(200);
    expect(moves).to.equal(1);
  });
});
