import { expect } from 'chai';
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { HttpGuestAgent } from '../../../../src/adapters/guest-link/http-guest-agent.js';
import { HEAD_LIMIT, parseHead } from '../../../../src/adapters/guest-link/raw-download.js';
import { AgentFailureError, NotFoundError } from '../../../../src/domain/errors.js';

/** A TCP "agent" that answers each connection with whatever `answer` writes, after the request head. */
function rawAgent(answer: (s: Socket, head: string) => void): Promise<{ port: number; srv: Server; heads: string[] }> {
  const heads: string[] = [];
  const srv = createServer((s) => {
    let buf = '';
    s.on('data', (c) => {
      buf += c.toString('latin1');
      const end = buf.indexOf('\r\n\r\n');
      if (end >= 0 && heads.length < 100) {
        heads.push(buf.slice(0, end));
        buf = '';
        answer(s, heads[heads.length - 1]);
      }
    });
    s.on('error', () => undefined);
  });
  return new Promise((r) =>
    srv.listen(0, '127.0.0.1', () => r({ port: (srv.address() as AddressInfo).port, srv, heads })),
  );
}

async function drain(body: NodeJS.ReadableStream): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of body) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

const chunked = (parts: string[]) =>
  parts.map((p) => `${Buffer.byteLength(p).toString(16)}\r\n${p}\r\n`).join('') + '0\r\n\r\n';
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

describe('adapters/guest-link raw download (GET /cp without the HTTP client)', () => {
  const agent = new HttpGuestAgent();
  after(() => agent.close());

  it('hands on exactly Content-Length bytes, whatever the chunking, and drops what a guest sends beyond', async () => {
    const data = randomBytes(3 * 1024 * 1024 + 17);
    const { port, srv, heads } = await rawAgent((s) => {
      s.write(`HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: ${data.length}\r\n\r\n`);
      s.write(data.subarray(0, 5));
      s.write(data.subarray(5));
      s.end(Buffer.from('<script>extra bytes past the length</script>'));
    });
    try {
      const got = await agent.download({ host: '127.0.0.1', port }, '/a b', 'binary');
      expect(got.size).to.equal(data.length);
      expect(got.contentType, "never the guest's type").to.equal('application/octet-stream');
      expect(sha(await drain(got.body))).to.equal(sha(data));
      expect(heads[0]).to.match(
        /^GET \/cp\?path=%2Fa\+b&mode=binary HTTP\/1\.1\r\nHost: 127\.0\.0\.1:\d+\r\nConnection: close$/,
      );
    } finally {
      srv.close();
    }
  });

  it('gathers a stream that arrives a network segment at a time into larger reads, byte-exact', async () => {
    // QEMU's user network writes a guest's stream to the host in ~1460-byte segments; a reader that
    // woke for each would spend the CPU the guest needs (raw-download.ts, PACE_BELOW).
    const data = randomBytes(4 * 1024 * 1024);
    const { port, srv } = await rawAgent((s) => {
      s.setNoDelay(true);
      s.write(`HTTP/1.1 200 OK\r\nContent-Length: ${data.length}\r\n\r\n`);
      let at = 0;
      const next = () => {
        if (at >= data.length) return void s.end();
        s.write(data.subarray(at, at + 1460));
        at += 1460;
        setImmediate(next);
      };
      next();
    });
    try {
      const got = await agent.download({ host: '127.0.0.1', port }, '/seg', 'binary');
      const parts: Buffer[] = [];
      for await (const c of got.body) parts.push(c as Buffer);
      expect(sha(Buffer.concat(parts))).to.equal(sha(data));
      expect(data.length / parts.length, 'mean bytes a read').to.be.above(4 * 1460);
    } finally {
      srv.close();
    }
  });

  it('fails the stream when the guest breaks off early, so a cut copy never looks whole', async () => {
    const { port, srv } = await rawAgent((s) => s.end('HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nonly this'));
    try {
      const got = await agent.download({ host: '127.0.0.1', port }, '/f', 'binary');
      const err = await drain(got.body).catch((e) => e);
      expect(err).to.be.instanceOf(AgentFailureError);
      expect(err.message).to.match(/broke off the download with \d+ bytes to go/);
    } finally {
      srv.close();
    }
  });

  it('maps error answers (chunked or not) by their code, and refuses answers without a length or with garbage', async () => {
    const answers: Record<string, string> = {
      '/nf': `HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${chunked(['{"error', '":"no such file","code":"not_found', '"}'])}`,
      '/nolen': 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
      '/twolen': 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!',
      '/garbage': 'SSH-2.0-OpenSSH\r\n\r\n',
      '/endless': `HTTP/1.1 200 OK\r\nX-Pad: ${'a'.repeat(HEAD_LIMIT + 10)}`,
      '/close': '',
    };
    const { port, srv } = await rawAgent((s, head) => {
      const path = decodeURIComponent(/path=([^&]+)/.exec(head)![1]);
      s.end(answers[path]);
    });
    try {
      const ep = { host: '127.0.0.1', port };
      const nf = await agent.download(ep, '/nf', 'binary').catch((e) => e);
      expect(nf).to.be.instanceOf(NotFoundError);
      expect(nf.message).to.equal('no such file');
      for (const [p, re] of [
        ['/nolen', /without its length/],
        ['/twolen', /two different lengths/],
        ['/garbage', /answered garbage/],
        ['/endless', /head over 16384 bytes/],
        ['/close', /closed the connection before answering/],
      ] as const) {
        const err = await agent.download(ep, p, 'binary').catch((e) => e);
        expect(err, p).to.be.instanceOf(AgentFailureError);
        expect(err.message, p).to.match(re);
      }
    } finally {
      srv.close();
    }
  });

  it('parses a head: status, lower-cased names, no folded lines', () => {
    const ep = { host: 'h', port: 1 };
    const h = parseHead('HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: 1\r\nx-a: 2', ep);
    expect(h.status).to.equal(200);
    expect(h.headers.get('content-length')).to.equal('3');
    expect(h.headers.get('x-a')).to.equal('1, 2');
    expect(() => parseHead('HTTP/1.1 200 OK\r\n folded', ep)).to.throw(AgentFailureError);
    expect(() => parseHead('HTTP/2 200', ep)).to.throw(AgentFailureError);
  });
});
