import { expect } from 'chai';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { Readable } from 'node:stream';
import { HttpGuestAgent } from '../../../../src/adapters/guest-link/http-guest-agent.js';
import { rawUpload } from '../../../../src/adapters/guest-link/raw-upload.js';
import { tcpConnector } from '../../../../src/adapters/guest-link/transport.js';
import { InvalidArgumentError, NotFoundError } from '../../../../src/domain/errors.js';
import {
  socketFd,
  splice,
  SpliceError,
  spliceHelper,
  SPLICE_MIN_BYTES,
  stopReads,
} from '../../../../src/adapters/process-kit/splice.js';
import { SEND_RAW, TAKE_RAW, type RawSendable } from '../../../../src/ports/guest-agent.js';

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** A TCP "agent" that answers each request with `answer`. */
function agentServer(answer: (s: Socket) => void): Promise<{ port: number; srv: Server }> {
  const srv = createServer((s) => {
    s.on('error', () => undefined);
    s.once('data', () => answer(s));
  });
  return new Promise((r) => srv.listen(0, '127.0.0.1', () => r({ port: (srv.address() as AddressInfo).port, srv })));
}

/**
 * A connection as the daemon's HTTP server holds one (`server`) and the client's end of it, which
 * gathers everything that arrives.
 */
async function connection(
  pauseOnCreate = false,
): Promise<{ server: Socket; received: () => Buffer; ended: Promise<void>; client: Socket; close: () => void }> {
  const parts: Buffer[] = [];
  const srv = createServer({ pauseOnConnect: pauseOnCreate });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const accepted = new Promise<Socket>((r) => srv.once('connection', r));
  const client = connect((srv.address() as AddressInfo).port, '127.0.0.1');
  client.on('data', (c: Buffer) => parts.push(c)).on('error', () => undefined);
  const ended = new Promise<void>((r) => client.once('close', () => r()));
  const server = await accepted;
  server.on('error', () => undefined);
  return {
    server,
    client,
    received: () => Buffer.concat(parts),
    ended,
    close: () => {
      server.destroy();
      srv.close();
    },
  };
}

const head = (n: number) => `HTTP/1.1 200 OK\r\nContent-Length: ${n}\r\n\r\n`;

describe('adapters/guest-link download handed to the client connection (splice helper)', function () {
  this.timeout(20000);
  const agent = new HttpGuestAgent();
  after(() => agent.close());

  /** A download whose body declines [SEND_RAW] (nothing taken) and then streams whole through Node. */
  async function declinedThenStreamed(data: Buffer, path: string, through = agent): Promise<void> {
    const { port, srv } = await agentServer((s) => s.end(Buffer.concat([Buffer.from(head(data.length)), data])));
    const c = await connection();
    try {
      const got = await through.download({ host: '127.0.0.1', port }, path, 'binary');
      expect(await (got.body as unknown as RawSendable)[SEND_RAW](c.server)).to.equal(false);
      const parts: Buffer[] = [];
      for await (const p of got.body) parts.push(p as Buffer);
      expect(sha(Buffer.concat(parts))).to.equal(sha(data));
    } finally {
      c.close();
      srv.close();
    }
  }

  before(() => {
    // npm run build makes it (scripts/build-native.mjs) with the C compiler node-pty needs anyway.
    expect(spliceHelper(), 'dist/native/svc-splice').to.be.a('string');
  });

  it('moves exactly the declared length after what Node had already read, in order, and drops the rest', async () => {
    const data = randomBytes(SPLICE_MIN_BYTES * 2 + 4097);
    const { port, srv } = await agentServer((s) => {
      s.write(head(data.length));
      s.write(data.subarray(0, 300_000));
      // The rest comes later, so the helper waits for it (poll) and Node has buffered a part.
      setTimeout(() => s.end(Buffer.concat([data.subarray(300_000), Buffer.from('beyond the length')])), 100);
    });
    const c = await connection();
    try {
      const got = await agent.download({ host: '127.0.0.1', port }, '/big', 'binary');
      await new Promise((r) => setTimeout(r, 50)); // let Node read ahead into the body's buffer
      c.server.write('HEAD;');
      const sent = await (got.body as unknown as RawSendable)[SEND_RAW](c.server);
      expect(sent).to.equal(true);
      c.server.end();
      await c.ended;
      const all = c.received();
      expect(all.subarray(0, 5).toString()).to.equal('HEAD;');
      expect(all.length - 5).to.equal(data.length);
      expect(sha(all.subarray(5))).to.equal(sha(data));
    } finally {
      c.close();
      srv.close();
    }
  });

  it('fails when the guest breaks off early, so the client is cut off instead of given a short file', async () => {
    const data = randomBytes(SPLICE_MIN_BYTES * 2);
    const { port, srv } = await agentServer((s) => {
      s.write(head(data.length + 1000));
      s.end(data);
    });
    const c = await connection();
    try {
      const got = await agent.download({ host: '127.0.0.1', port }, '/cut', 'binary');
      let err: Error | undefined;
      await (got.body as unknown as RawSendable)[SEND_RAW](c.server).catch((e: Error) => {
        err = e;
      });
      expect(err?.message).to.match(/ended with 1000 bytes to go/);
      expect(got.body.destroyed).to.equal(true);
    } finally {
      c.close();
      srv.close();
    }
  });

  it('stops when the client leaves, and stops its helper when the body is destroyed', async () => {
    const { port, srv } = await agentServer((s) => {
      s.write(head(64 * 1024 * 1024));
      s.write(randomBytes(SPLICE_MIN_BYTES)); // then nothing: the helper waits on the guest
    });
    const c = await connection();
    try {
      const got = await agent.download({ host: '127.0.0.1', port }, '/slow', 'binary');
      const sending = (got.body as unknown as RawSendable)[SEND_RAW](c.server);
      await new Promise((r) => setTimeout(r, 300));
      got.body.destroy(); // what sendStream does when the client's answer closes
      let err: Error | undefined;
      await sending.catch((e: Error) => {
        err = e;
      });
      expect(err?.message).to.match(/SIGKILL/);
    } finally {
      c.close();
      srv.close();
    }
  });

  it('declines a small body, which then streams through Node as before', async () => {
    await declinedThenStreamed(randomBytes(SPLICE_MIN_BYTES - 1), '/small');
  });

  it('declines without a helper (splice: off, or a path that is not there)', async () => {
    for (const setting of ['off', '/nonexistent/svc-splice']) expect(spliceHelper(setting), setting).to.equal(null);
    expect(existsSync(spliceHelper('auto') ?? ''), 'auto: the one built beside the daemon').to.equal(true);
    const without = new HttpGuestAgent(undefined, { splice: 'off' });
    try {
      await declinedThenStreamed(randomBytes(SPLICE_MIN_BYTES + 1), '/nohelper', without);
    } finally {
      without.close();
    }
  });
});

/** An "agent" that reads a PUT's head and `take` bytes of its body, then answers with `reply`. */
function uploadAgent(
  take: (len: number) => number,
  reply: string,
): Promise<{ port: number; srv: Server; got: Promise<{ head: string; body: Buffer }> }> {
  let report: (r: { head: string; body: Buffer }) => void = () => undefined;
  const got = new Promise<{ head: string; body: Buffer }>((r) => {
    report = r;
  });
  const srv = createServer((s) => {
    s.on('error', () => undefined);
    let buf = Buffer.alloc(0);
    let head: string | undefined;
    let want = 0;
    s.on('data', (c: Buffer) => {
      buf = Buffer.concat([buf, c]);
      if (head === undefined) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        head = buf.subarray(0, end).toString('latin1');
        buf = buf.subarray(end + 4);
        want = take(Number(/content-length: (\d+)/i.exec(head)![1]));
      }
      if (buf.length >= want) {
        report({ head, body: buf.subarray(0, want) });
        s.end(reply);
        s.destroy();
      }
    });
  });
  return new Promise((r) =>
    srv.listen(0, '127.0.0.1', () => r({ port: (srv.address() as AddressInfo).port, srv, got })),
  );
}

/**
 * An upload body whose connection can be taken, as the HTTP server's would be: its first 64 KiB
 * "already read" (pending), the rest (or all but the last `short` bytes) still in the socket.
 */
async function uploadBody(data: Buffer, short = 0): Promise<{ body: Readable; close: () => void }> {
  const c = await connection(true); // nothing read by Node, as with the HTTP server's stopped reads
  const read = 64 * 1024;
  c.client.write(data.subarray(read, data.length - short), () => {
    if (short) c.client.end();
  });
  const body = Object.assign(new Readable({ read() {} }), {
    [TAKE_RAW]: () => ({ connection: c.server, pending: data.subarray(0, read) }),
  });
  return { body, close: c.close };
}

describe('adapters/guest-link upload taken from the client connection (splice helper)', function () {
  this.timeout(20000);
  const J = JSON.stringify;
  const put = (port: number, size: number, body: Readable) =>
    rawUpload(
      tcpConnector,
      { host: '127.0.0.1', port },
      {
        path: '/cp?path=%2Fx',
        contentType: 'application/octet-stream',
        size,
        connectTimeoutMs: 2000,
        helper: spliceHelper(),
      },
      body,
    );

  it('sends the head, what was read, then the rest from the client socket, byte-exact, and reads the answer', async () => {
    const data = randomBytes(SPLICE_MIN_BYTES * 3 + 11);
    const a = await uploadAgent((n) => n, 'HTTP/1.1 204 No Content\r\n\r\n');
    const b = await uploadBody(data);
    try {
      expect(await put(a.port, data.length, b.body)).to.equal(true);
      const { head, body } = await a.got;
      expect(head).to.match(
        new RegExp(`^PUT /cp\\?path=%2Fx HTTP/1.1\r\n.*Content-Length: ${data.length}\r\nConnection: close$`, 's'),
      );
      expect(sha(body)).to.equal(sha(data));
    } finally {
      b.close();
      a.srv.close();
    }
  });

  it("returns the agent's own error when it stops taking the body part way", async () => {
    const data = randomBytes(SPLICE_MIN_BYTES * 4);
    const a = await uploadAgent(
      () => 1000,
      `HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n\r\n${J({ error: 'no such directory: /x', code: 'not_found' })}`,
    );
    const b = await uploadBody(data);
    try {
      let err: Error | undefined;
      await put(a.port, data.length, b.body).catch((e: Error) => {
        err = e;
      });
      expect(err).to.be.instanceOf(NotFoundError);
      expect(err?.message).to.equal('no such directory: /x');
    } finally {
      b.close();
      a.srv.close();
    }
  });

  it("fails as the caller's error when the client's body ends before its declared length", async () => {
    const data = randomBytes(SPLICE_MIN_BYTES * 2);
    const a = await uploadAgent((n) => n, 'HTTP/1.1 204 No Content\r\n\r\n');
    const b = await uploadBody(data, 5000);
    try {
      let err: Error | undefined;
      await put(a.port, data.length, b.body).catch((e: Error) => {
        err = e;
      });
      expect(err).to.be.instanceOf(InvalidArgumentError);
      expect(err?.message).to.match(/broke off before its declared length.*5000 bytes to go/, err?.message);
    } finally {
      b.close();
      a.srv.close();
    }
  });

  it('declines a small upload or a body that cannot give its connection (nothing taken, no connection made)', async () => {
    let connections = 0;
    const srv = createServer((s) => {
      connections++;
      s.destroy();
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
    const port = (srv.address() as AddressInfo).port;
    let offered = 0;
    const small = Object.assign(new Readable({ read() {} }), {
      [TAKE_RAW]: () => {
        offered++;
        return undefined;
      },
    });
    try {
      expect(await put(port, SPLICE_MIN_BYTES - 1, small)).to.equal(false);
      expect(await put(port, SPLICE_MIN_BYTES, new Readable({ read() {} }))).to.equal(false);
      expect({ connections, offered }).to.deep.equal({ connections: 0, offered: 0 });
    } finally {
      srv.close();
    }
  });
});

describe('process-kit splice helper toward a Unix-socket client, splicing and copying', function () {
  this.timeout(20000);
  let dir: string;
  let p: Awaited<ReturnType<typeof pair>> | undefined;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'svc-splice-'));
  });
  afterEach(() => {
    p?.close();
    p = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  /** A Unix-socket client paused from the start, and a TCP source that sends `data` at once. */
  async function pair(data: Buffer) {
    const unixSrv = createServer();
    await new Promise<void>((r) => unixSrv.listen(join(dir, 's.sock'), () => r()));
    const accepted = new Promise<Socket>((r) => unixSrv.once('connection', r));
    const client = connect(join(dir, 's.sock'));
    client.pause();
    const dest = await accepted;
    // A source closed with bytes unread resets its peer: expected here, not a failure.
    const tcpSrv = createServer((s) => s.on('error', () => undefined).end(data));
    await new Promise<void>((r) => tcpSrv.listen(0, '127.0.0.1', () => r()));
    const source = connect((tcpSrv.address() as AddressInfo).port, '127.0.0.1');
    await new Promise((r) => source.once('connect', r));
    stopReads(source);
    for (const s of [client, dest, source]) s.on('error', () => undefined);
    const close = () => {
      for (const s of [client, dest, source]) s.destroy();
      unixSrv.close();
      tcpSrv.close();
    };
    return { client, dest, source, close };
  }

  /** Starts the client reading; settles with all it got once the daemon's end is closed. */
  function received(client: Socket): Promise<Buffer> {
    const parts: Buffer[] = [];
    client.on('data', (c: Buffer) => parts.push(c));
    client.resume();
    return new Promise((r) => client.once('end', () => r(Buffer.concat(parts))));
  }

  /** O_NONBLOCK of the daemon's descriptor, read from /proc. */
  const nonBlocking = (s: Socket) =>
    (parseInt(/flags:\s+(\d+)/.exec(readFileSync(`/proc/self/fdinfo/${socketFd(s)}`, 'utf8'))![1], 8) & 0o4000) !== 0;

  for (const mode of ['splice', 'copy'] as const) {
    it(`${mode}: leaves both sockets non-blocking for the daemon after the copy, though spawning made them blocking`, async () => {
      const data = randomBytes(256 * 1024);
      p = await pair(data);
      expect(nonBlocking(p.source) && nonBlocking(p.dest), 'before').to.equal(true);
      const got = received(p.client);
      await splice(spliceHelper()!, p.source, p.dest, data.length, { idleSeconds: 2, mode }).done;
      // A blocking socket under libuv would stall the whole event loop on the next full write.
      expect(nonBlocking(p.source), 'source').to.equal(true);
      expect(nonBlocking(p.dest), 'destination').to.equal(true);
      p.dest.end();
      expect(sha(await got)).to.equal(sha(data));
    });

    it(`${mode}: gives up on a client that takes nothing for its idle limit, as the destination's failure`, async () => {
      const data = randomBytes(32 * 1024 * 1024);
      p = await pair(data);
      const started = Date.now();
      const err = await splice(spliceHelper()!, p.source, p.dest, data.length, { idleSeconds: 1, mode }).done.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).to.be.instanceOf(SpliceError);
      expect((err as SpliceError).side).to.equal('destination');
      expect((err as Error).message).to.match(/took nothing for 1 s/);
      expect(Date.now() - started).to.be.below(10000);
    });

    it(`${mode}: queues up to megabytes for a client that is not reading yet, so its reads find large pieces waiting`, async () => {
      const data = randomBytes(2 * 1024 * 1024);
      p = await pair(data);
      // With the kernel's default send buffer (~200 KiB) the helper would wait for the client and
      // give up after its 2 s idle limit; with its own 4 MiB buffer all 2 MiB are queued.
      await splice(spliceHelper()!, p.source, p.dest, data.length, { idleSeconds: 2, mode }).done;
      const got = received(p.client);
      p.dest.end();
      expect(sha(await got)).to.equal(sha(data));
    });
  }

  it('refuses a mode it does not know, as its own failure, and moves nothing', async () => {
    const data = randomBytes(64 * 1024);
    p = await pair(data);
    const err = await splice(spliceHelper()!, p.source, p.dest, data.length, { mode: 'zerocopy' as 'copy' }).done.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).to.be.instanceOf(SpliceError);
    expect((err as SpliceError).side).to.equal('helper');
    expect((err as Error).message).to.match(/bad mode zerocopy/);
    const got = received(p.client);
    p.dest.end();
    expect((await got).length).to.equal(0);
  });
});
