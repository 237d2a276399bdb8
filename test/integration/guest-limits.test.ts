import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { maxHeaderSize, request } from 'node:http';
import { connect } from 'node:net';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';
import { toReply, type Reply } from '../helpers/http.js';
import { poll } from '../helpers/wait.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Processes on this host whose command line is exactly `sleep <secs>` (fake_agent runs guests' commands here). */
const sleepers = (secs: string) => {
  try {
    return execFileSync('pgrep', ['-fx', `sleep ${secs}`], { encoding: 'utf8' })
      .trim()
      .split('\n')
      .filter(Boolean).length;
  } catch {
    return 0;
  }
};

/** Hung execs, clients that leave, and aborted shell upgrades on a daemon with small caps. */
describe('execs and shells: caps, cancellation and aborted upgrades (real local agents)', function () {
  this.timeout(60_000);
  let d: TestDaemon;
  before(async () => {
    d = await startTestDaemon({
      fake_agent: true,
      max_execs_per_vm: 2,
      max_execs_total: 3,
      sandbox_metrics_enabled: false,
    });
    for (const name of ['a', 'b']) expect((await d.call('POST', '/vms', { name })).status).to.equal(201);
  });
  after(async () => d.stop());

  /** Opens an exec and leaves it open; resolves once the command runs, with a function that hangs up. */
  const openExec = (vm: string, secs: string, buffered: boolean) =>
    new Promise<() => void>((resolve, reject) => {
      const req = request(
        {
          socketPath: d.config.socket,
          method: 'POST',
          path: `/vms/${vm}/exec?cmd=sleep&args=${secs}&buffered=${buffered}`,
          headers: { authorization: 'Bearer test-token' },
        },
        (res) => {
          if (res.statusCode !== 200) reject(new Error(`status ${res.statusCode}`));
        },
      );
      req.on('error', () => undefined);
      req.end();
      void poll(() => sleepers(secs) > 0, { ms: 5000 }).then(() => resolve(() => req.destroy()));
    });

  it('refuses an exec past the per-VM and total caps with 429 and Retry-After, and frees the slot when a client leaves', async () => {
    const hang = [await openExec('a', '301', false), await openExec('a', '302', true)];
    const over = await d.call('POST', '/vms/a/exec?cmd=true');
    expect(over.status).to.equal(429);
    expect(over.headers['retry-after']).to.equal('1');
    expect(over.json.error).to.match(/max_execs_per_vm/);
    hang.push(await openExec('b', '303', false));
    const total = await d.call('POST', '/vms/b/exec?cmd=true');
    expect(total.status).to.equal(429);
    expect(total.json.error).to.match(/max_execs_total/);
    // Clients that leave kill their commands in the guest, streamed and buffered alike.
    for (const h of hang) h();
    expect(
      await poll(() => sleepers('301') + sleepers('302') + sleepers('303') === 0, { ms: 5000 }),
      `commands killed: ${sleepers('301')} ${sleepers('302')} ${sleepers('303')}`,
    ).to.equal(true);
    await sleep(100);
    expect((await d.call('POST', '/vms/a/exec?cmd=true')).status).to.equal(200);
    expect((await d.call('POST', '/vms/b/exec?cmd=true')).status).to.equal(200);
  });

  it('frees the slot and kills the command of a streamed exec whose client leaves mid-stream, while output is backed up', async () => {
    for (let i = 0; i < 3; i++) {
      await new Promise<void>((resolve) => {
        const req = request(
          {
            socketPath: d.config.socket,
            method: 'POST',
            path: '/vms/a/exec?cmd=yes&args=svc-soak-yes&buffered=false',
            headers: { authorization: 'Bearer test-token' },
          },
          (res) => {
            res.once('data', () => {
              res.pause(); // let the daemon's writes back up, then leave
              setTimeout(() => {
                req.destroy();
                resolve();
              }, 300);
            });
          },
        );
        req.on('error', () => undefined);
        req.end();
      });
    }
    const yesCount = () => {
      try {
        return execFileSync('pgrep', ['-fx', 'yes svc-soak-yes'], { encoding: 'utf8' })
          .trim()
          .split('\n')
          .filter(Boolean).length;
      } catch {
        return 0;
      }
    };
    expect(await poll(() => yesCount() === 0, { ms: 5000 }), 'yes killed').to.equal(true);
    await sleep(200);
    const r = await Promise.all([d.call('POST', '/vms/a/exec?cmd=true'), d.call('POST', '/vms/a/exec?cmd=true')]);
    expect(r.map((x) => x.status)).to.deep.equal([200, 200]);
  });

  it('closes the guest shell of an upgrade whose client is gone, so its slot comes back', async () => {
    for (let i = 0; i < 4; i++) {
      await new Promise<void>((resolve) => {
        const s = connect(d.config.socket, () => {
          s.write(
            'GET /vms/a/shell HTTP/1.1\r\nHost: svc\r\nAuthorization: Bearer test-token\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n' +
              'Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
          );
          // gone before the daemon has the guest's shell
          setTimeout(() => {
            s.destroy();
            resolve();
          }, i * 5);
        });
        s.on('error', () => resolve());
      });
    }
    await sleep(500);
    const r = await Promise.all([d.call('POST', '/vms/a/exec?cmd=true'), d.call('POST', '/vms/a/exec?cmd=true')]);
    expect(r.map((x) => x.status)).to.deep.equal([200, 200]);
  });

  it('refuses an upgrade without the WebSocket headers before opening a shell', async () => {
    const text = await new Promise<string>((resolve) => {
      const s = connect(d.config.socket, () =>
        s.write(
          'GET /vms/a/shell HTTP/1.1\r\nHost: svc\r\nAuthorization: Bearer test-token\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n',
        ),
      );
      let got = '';
      s.on('data', (c) => (got += c.toString()));
      s.on('close', () => resolve(got));
    });
    expect(text).to.match(/^HTTP\/1.1 400/);
    expect(text).to.match(/Sec-WebSocket-Key/);
  });
});

/** Slowloris on both listeners, while slow bodies and long answers keep working. */
describe('slow clients (header_timeout 1s)', function () {
  this.timeout(30_000);
  let d: TestDaemon;
  before(async () => {
    d = await startTestDaemon({ fake_agent: true, header_timeout: '1s', sandbox_metrics_enabled: false });
    expect((await d.call('POST', '/vms', { name: 's' })).status).to.equal(201);
  });
  after(async () => d.stop());

  const trickleHeaders = (opts: { port?: number; path?: string }) =>
    new Promise<{ ms: number; got: string }>((resolve) => {
      const t0 = Date.now();
      const s = opts.path ? connect(opts.path) : connect(opts.port!, '127.0.0.1');
      let got = '';
      s.on('connect', () => s.write('GET /vms HTTP/1.1\r\nHost: 127.0.0.1\r\n')); // and never the end of the headers
      s.on('data', (c) => (got += c.toString()));
      s.on('close', () => resolve({ ms: Date.now() - t0, got }));
      s.on('error', () => undefined);
    });

  it('closes a connection whose headers do not arrive in time, on the socket and on TCP', async () => {
    for (const r of await Promise.all([
      trickleHeaders({ path: d.config.socket }),
      trickleHeaders({ port: d.tcp.port }),
    ])) {
      expect(r.ms).to.be.within(900, 6000);
      // answered as every refusal is, with an {error}, unless the socket went first
      if (r.got)
        expect(r.got).to.match(/^HTTP\/1.1 408 [\s\S]*\r\n\r\n\{"error":"the request headers did not arrive in time"/);
    }
  });

  it("answers headers past node's limit with 431 and an {error}, on the socket and on TCP", async () => {
    const url = `/vms?x=${'a'.repeat(maxHeaderSize + 1)}`;
    for (const target of [{ socketPath: d.config.socket }, { host: '127.0.0.1', port: d.tcp.port }]) {
      const r = await new Promise<Reply>((resolve, reject) => {
        const req = request({ ...target, path: url, headers: { authorization: 'Bearer test-token' } }, (res) => {
          const parts: Buffer[] = [];
          res.on('data', (c: Buffer) => parts.push(c));
          res.on('end', () => resolve(toReply(res.statusCode ?? 0, res.headers, Buffer.concat(parts))));
        });
        req.on('error', reject);
        req.end();
      });
      expect(r.status).to.equal(431);
      expect(r.json.error).to.match(/headers larger than \d+ bytes/);
      expect(r.headers.connection).to.equal('close');
    }
    expect((await d.call('GET', '/vms')).status, 'the daemon answers on').to.equal(200);
  });

  it('keeps a long exec stream and a slow upload going past it', async () => {
    const stream = await d.call('POST', '/vms/s/exec?cmd=sh&args=-c&args=sleep+2.5%3B+echo+late');
    expect(stream.status).to.equal(200);
    expect(stream.text).to.contain('late');
    const path = join(tempDir(), 'slow.bin');
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(
        {
          socketPath: d.config.socket,
          method: 'PUT',
          path: `/vms/s/cp?path=${encodeURIComponent(path)}`,
          headers: {
            authorization: 'Bearer test-token',
            'content-type': 'application/octet-stream',
            'transfer-encoding': 'chunked',
          },
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        },
      );
      req.on('error', reject);
      let n = 0;
      const tick = setInterval(() => {
        req.write(Buffer.alloc(1024, 1));
        if (++n === 5) {
          clearInterval(tick);
          req.end();
        }
      }, 600);
    });
    expect(status).to.equal(204);
    expect(readFileSync(path).length).to.equal(5 * 1024);
  });
});

describe('the daemon-wide budget for guest answers (guest_reply_budget_mb, real local agents)', function () {
  this.timeout(60_000);
  let d: TestDaemon;
  before(async () => {
    d = await startTestDaemon({ fake_agent: true, guest_reply_budget_mb: 1, sandbox_metrics_enabled: false });
    expect((await d.call('POST', '/vms', { name: 'rb' })).status).to.equal(201);
  });
  after(async () => d.stop());

  it('answers 503 with Retry-After for an answer past the budget, and serves what fits', async () => {
    const big = await d.call(
      'POST',
      '/vms/rb/exec?cmd=sh&args=-c&args=' + encodeURIComponent("head -c 1500000 /dev/zero | tr '\\0' x"),
    );
    expect(big.status, big.text).to.equal(503);
    expect(big.headers['retry-after']).to.equal('1');
    expect(big.json.error).to.match(/guest_reply_budget_mb/);
    const small = await d.call(
      'POST',
      '/vms/rb/exec?cmd=sh&args=-c&args=' + encodeURIComponent("head -c 500000 /dev/zero | tr '\\0' x"),
    );
    expect(small.status, small.text).to.equal(200);
    expect(small.json.stdout).to.have.length(500000);
  });
});
