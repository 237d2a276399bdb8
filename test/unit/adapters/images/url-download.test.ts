import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { createHash, pbkdf2, pbkdf2Sync } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { gzipSync } from 'node:zlib';
import { join } from 'node:path';
import { downloadDisk } from '../../../../src/adapters/images/url-download.js';
import { InvalidArgumentError } from '../../../../src/domain/errors.js';
import type { UrlSource } from '../../../../src/domain/image-request.js';
import type { ImageProgress } from '../../../../src/ports/guest-images.js';

const DISK = Buffer.alloc(256 << 10, 7);
/** What a server that changed its file meanwhile has now. */
const CHANGED = Buffer.alloc(DISK.length, 9);
const sha = (algorithm: string, b: Buffer) => `${algorithm}:${createHash(algorithm).update(b).digest('hex')}`;

describe('adapters/images/downloadDisk (a disk from its URL)', () => {
  let server: Server;
  let base: string;
  let dir: string;
  const routes: Record<string, (res: ServerResponse) => void> = {
    '/disk': (res) => res.writeHead(200, { 'content-length': DISK.length }).end(DISK),
    '/moved': (res) => res.writeHead(302, { location: '/disk' }).end(),
    // a server that compresses what it sends whenever the client says it may
    '/gzips': (res) => {
      if (!/gzip/.test(String(res.req.headers['accept-encoding']))) return res.end(DISK);
      const packed = gzipSync(DISK);
      res.writeHead(200, { 'content-encoding': 'gzip', 'content-length': packed.length }).end(packed);
    },
    '/chunked': (res) => {
      res.writeHead(200);
      res.write(DISK);
      res.end(DISK);
    },
    '/claims-a-terabyte': (res) => {
      res.writeHead(200, { 'content-length': String(2 ** 40) });
      res.write(DISK);
    },
    '/stalls': (res) => {
      res.writeHead(200, { 'content-length': DISK.length * 2 });
      res.write(DISK);
    },
    '/short': (res) => {
      res.writeHead(200, { 'content-length': DISK.length * 2 });
      res.end(DISK);
      res.socket?.destroy();
    },
  };
  /** Servers that break off after the first PART bytes and take ranges, with the Range and If-Range of each request. */
  const PART = 100 << 10;
  const asked: string[] = [];
  const ranged = (o: { then: 'close' | 'stall'; always?: boolean; bad?: boolean; changes?: boolean }) => {
    let calls = 0;
    return (res: ServerResponse) => {
      const { range, 'if-range': ifRange } = res.req.headers;
      asked.push(`${range ?? 'whole'}${ifRange ? ` if ${ifRange}` : ''}`);
      // One that changes has another version from its second answer on.
      const later = o.changes && calls++ > 0;
      const [etag, body] = later ? ['"v2"', CHANGED] : ['"v1"', DISK];
      const head = { 'accept-ranges': 'bytes', etag };
      const m = /^bytes=(\d+)-$/.exec(range ?? '');
      const cut = (from: number, n: number) => {
        res.write(body.subarray(from, from + n));
        if (o.then === 'close') setTimeout(() => res.socket?.destroy(), 20);
      };
      if (!m || ifRange !== etag) {
        res.writeHead(200, { ...head, 'content-length': body.length });
        return later ? res.end(body) : cut(0, PART);
      }
      const from = Number(m[1]);
      res.writeHead(206, {
        ...head,
        'content-range': `bytes ${o.bad ? 0 : from}-${body.length - 1}/${body.length}`,
        'content-length': body.length - from,
      });
      if (o.always) return cut(from, PART / 4);
      res.end(body.subarray(from));
    };
  };
  /** Keeps every thread of libuv's pool busy for about `ms`: file writes wait for one meanwhile. */
  const busyPool = (ms: number) => {
    const t0 = process.hrtime.bigint();
    pbkdf2Sync('svc', 'test', 2000, 32, 'sha256');
    const perIteration = Number(process.hrtime.bigint() - t0) / 1e6 / 2000;
    const iterations = Math.max(1000, Math.round(ms / perIteration));
    for (let i = 0; i < Number(process.env.UV_THREADPOOL_SIZE ?? 4); i++)
      pbkdf2('svc', 'test', iterations, 32, 'sha256', () => undefined);
  };
  const breaksOff = ranged({ then: 'close' });
  Object.assign(routes, {
    // the first bytes come while the file's writes wait for a thread; the break comes before they are written
    '/breaks-off-busy': (res: ServerResponse) => {
      if (!res.req.headers.range) busyPool(150);
      breaksOff(res);
    },
    '/breaks-off': ranged({ then: 'close' }),
    '/goes-silent': ranged({ then: 'stall' }),
    '/always-breaks': ranged({ then: 'close', always: true }),
    '/changed': ranged({ then: 'close', changes: true }),
    '/bad-range': ranged({ then: 'close', bad: true }),
  });
  const limit = { bytes: 1 << 20, why: 'the test' };
  const get = (path: string, digest?: string, progress: (p: ImageProgress) => void = () => undefined) => {
    const source: UrlSource = { type: 'url', url: base + path, ...(digest ? { digest } : {}) };
    return downloadDisk(source, join(dir, 'download'), limit, progress, { totalMs: 5000, idleMs: 300, resumes: 3 });
  };
  const refusal = async (p: Promise<void>) => {
    const err = await p.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).to.be.instanceOf(InvalidArgumentError);
    return (err as Error).message;
  };

  before(async () => {
    server = createServer((req, res) => (routes[req.url ?? ''] ?? ((r) => r.writeHead(404).end()))(res));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'svc-download-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('downloads a disk whole, redirects followed, its digest (sha256 or sha512) checked, with progress', async () => {
    const seen: ImageProgress[] = [];
    await get('/moved', sha('sha512', DISK), (p) => void seen.push(p));
    expect(readFileSync(join(dir, 'download')).equals(DISK)).to.equal(true);
    expect(seen.at(-1)).to.deep.equal({ percent: 55, message: 'downloaded 256 KiB' });
    expect(seen.map((p) => p.percent)).to.deep.equal([...seen.map((p) => p.percent)].sort((a, b) => a - b));
    await get('/gzips', sha('sha256', DISK));
    expect(readFileSync(join(dir, 'download')).equals(DISK), 'asked for the bytes as they are').to.equal(true);
    await get('/chunked', sha('sha256', Buffer.concat([DISK, DISK])));
    expect(readFileSync(join(dir, 'download')).length).to.equal(DISK.length * 2);
  });

  it("checks an https server's certificate: one of its own making is not trusted", async () => {
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-subj',
        '/CN=127.0.0.1',
        '-days',
        '1',
        '-keyout',
        join(dir, 'key.pem'),
        '-out',
        join(dir, 'cert.pem'),
      ],
      { stdio: 'ignore' },
    );
    const tls = createHttpsServer(
      { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) },
      (_req, res) => res.end(DISK),
    );
    await new Promise<void>((r) => tls.listen(0, '127.0.0.1', r));
    const url = `https://127.0.0.1:${(tls.address() as AddressInfo).port}/disk`;
    try {
      const err = await downloadDisk({ type: 'url', url }, join(dir, 'download'), limit, () => undefined).catch(
        (e: Error) => e,
      );
      expect((err as Error).message).to.equal(`from: ${url}: could not be reached: DEPTH_ZERO_SELF_SIGNED_CERT`);
    } finally {
      tls.closeAllConnections();
      tls.close();
    }
  });

  it('refuses a digest that does not match, saying both', async () => {
    const wrong = sha('sha256', Buffer.from('another disk'));
    expect(await refusal(get('/disk', wrong))).to.equal(
      `from: ${base}/disk: its sha256 is ${sha('sha256', DISK).slice(7)}, not the digest given (${wrong.slice(7)})`,
    );
  });

  it('refuses plain HTTP without a digest, a redirect included', async () => {
    expect(await refusal(get('/moved'))).to.equal(
      `from: ${base}/moved: redirected to plain HTTP (${base}); give the image's digest`,
    );
  });

  it('refuses more than the limit: a Content-Length over it before reading, a body that runs past it as it comes', async () => {
    expect(await refusal(get('/claims-a-terabyte', sha('sha256', DISK)))).to.equal(
      `from: ${base}/claims-a-terabyte: 1.0 TiB, more than 1.0 MiB (the test)`,
    );
    const bigger = { ...limit, bytes: DISK.length + 1000 };
    const source: UrlSource = { type: 'url', url: `${base}/chunked`, digest: sha('sha256', DISK) };
    const err = await downloadDisk(source, join(dir, 'download'), bigger, () => undefined).catch((e: Error) => e);
    expect((err as Error).message).to.equal(
      `from: ${base}/chunked: more than 257 KiB (the test); the download was stopped`,
    );
  });

  it('gives up on a server that stops sending, one that closes early, a 404 and a port with nobody', async () => {
    const t0 = Date.now();
    expect(await refusal(get('/stalls', sha('sha256', DISK)))).to.equal(`from: ${base}/stalls: nothing came for 0.3 s`);
    expect(Date.now() - t0).to.be.below(3000);
    expect(await refusal(get('/short', sha('sha256', DISK)))).to.match(
      new RegExp(`^from: ${base}/short: (the download broke off: .+|256 KiB came of the 512 KiB announced)$`),
    );
    expect(await refusal(get('/nothing-here', sha('sha256', DISK)))).to.equal(
      `from: ${base}/nothing-here: answered 404 Not Found`,
    );
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    closed.close();
    const source: UrlSource = { type: 'url', url: `http://127.0.0.1:${port}/x`, digest: sha('sha256', DISK) };
    const err = await downloadDisk(source, join(dir, 'x'), limit, () => undefined).catch((e: Error) => e);
    expect((err as Error).message).to.equal(`from: http://127.0.0.1:${port}/x: could not be reached: ECONNREFUSED`);
    expect(existsSync(join(dir, 'x'))).to.equal(false);
  });

  it('resumes a download that broke off or went silent where it stopped, the same file asked for (If-Range)', async () => {
    for (const path of ['/breaks-off', '/goes-silent']) {
      asked.length = 0;
      const seen: string[] = [];
      await get(path, sha('sha256', DISK), (p) => void seen.push(p.message));
      expect(readFileSync(join(dir, 'download')).equals(DISK), path).to.equal(true);
      expect(asked, path).to.deep.equal(['whole', `bytes=${PART}- if "v1"`]);
      const why = path === '/breaks-off' ? 'the download broke off: .+' : 'nothing came for 0.3 s';
      expect(
        seen.filter((m) => /resuming/.test(m)),
        path,
      ).to.have.length(1);
      expect(
        seen.find((m) => /resuming/.test(m)),
        path,
      ).to.match(new RegExp(`^the download stopped at 100 KiB \\(${why}\\); resuming there \\(1 of 3\\)$`));
    }
  });

  it('writes every byte that came before a break before it resumes, however slow the writes (a busy disk)', async () => {
    asked.length = 0;
    await get('/breaks-off-busy', sha('sha256', DISK));
    expect(readFileSync(join(dir, 'download')).equals(DISK), 'the file is the disk').to.equal(true);
    expect(asked).to.deep.equal(['whole', `bytes=${PART}- if "v1"`]);
  });

  it('downloads a file that changed meanwhile again from its start, and gives up after the resumes allowed', async () => {
    // The server's file is another version than the one the first bytes were of: it answers the
    // range with the whole new file, which is what the digest is checked against.
    asked.length = 0;
    await get('/changed', sha('sha256', CHANGED));
    expect(readFileSync(join(dir, 'download')).equals(CHANGED)).to.equal(true);
    expect(asked).to.deep.equal(['whole', `bytes=${PART}- if "v1"`]);
    asked.length = 0;
    expect(await refusal(get('/always-breaks', sha('sha256', DISK)))).to.match(
      new RegExp(`^from: ${base}/always-breaks: the download broke off: `),
    );
    expect(asked).to.have.length(4);
    expect(asked.slice(1)).to.deep.equal([
      `bytes=${PART}- if "v1"`,
      `bytes=${PART * 1.25}- if "v1"`,
      `bytes=${PART * 1.5}- if "v1"`,
    ]);
    expect(await refusal(get('/bad-range', sha('sha256', DISK)))).to.equal(
      `from: ${base}/bad-range: asked for the rest from byte ${PART}, it answered 206 bytes 0-${DISK.length - 1}/${DISK.length}`,
    );
  });
});
