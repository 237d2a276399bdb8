import { expect } from 'chai';
import { createServer, request, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { proxyRequest, proxyUpgrade } from '../../../../src/adapters/http-kit/node-proxy.js';

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

describe('proxyRequest and proxyUpgrade for a caller gone before the call went on', function () {
  this.timeout(10_000);
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  /** A target counting connections and requests; a front that sends a call on once its caller has left. */
  async function gone(upgrade: boolean) {
    let connections = 0;
    let requests = 0;
    const target = createServer(() => requests++);
    target.on('connection', () => connections++);
    target.on('upgrade', (_req, socket) => {
      requests++;
      socket.destroy();
    });
    const url = await listen(target);
    const f = createServer((req, res) =>
      req.socket.once('close', () => void proxyRequest(req, res, { url, headers: {} }).catch(() => undefined)),
    );
    // An upgraded socket is not read, so a caller's leaving is not heard there; one destroyed
    // (an error, a timeout) while the route was looked up is what the proxy can see.
    f.on('upgrade', (req, socket, head) => {
      socket.destroy();
      setTimeout(() => proxyUpgrade(req, socket, head, { url, headers: {} }), 20);
    });
    const port = Number((await listen(f)).split(':')[2]);
    const call = connect(port, '127.0.0.1', () =>
      call.write(
        `GET /vms/a/shell HTTP/1.1\r\nhost: x\r\n${upgrade ? 'connection: upgrade\r\nupgrade: websocket\r\n' : ''}\r\n`,
      ),
    );
    call.on('error', () => undefined);
    await sleep(50);
    call.destroy();
    await sleep(300);
    for (const s of [target, f]) {
      s.closeAllConnections();
      s.close();
    }
    return { connections, requests };
  }

  it('sends no request on', async () => {
    expect((await gone(false)).requests).to.equal(0);
  });

  it('opens no connection for an upgrade', async () => {
    expect(await gone(true)).to.deep.equal({ connections: 0, requests: 0 });
  });
});
