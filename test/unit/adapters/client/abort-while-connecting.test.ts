import { expect } from 'chai';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SvcClient } from '../../../../src/adapters/client/svc-client.js';

/**
 * A follow aborted while its request is on the way (before the daemon's answer has come) ends
 * once the answer comes, instead of following on: the abort was missed when the client listened
 * for it only after the answer.
 */
describe('SvcClient: a follow aborted while its request is on the way', function () {
  this.timeout(10_000);
  let server: Server;
  let client: SvcClient;
  const open: ServerResponse[] = [];

  beforeEach(async () => {
    // Answers each stream 300 ms late, then sends a line every 50 ms until the client goes.
    server = createServer((req, res) => {
      open.push(res);
      setTimeout(() => {
        res.writeHead(200, { 'content-type': 'application/x-ndjson' });
        const tick = setInterval(() => res.write(JSON.stringify({ type: 'ping' }) + '\n'), 50);
        res.on('close', () => clearInterval(tick));
      }, 300);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    client = new SvcClient({ api: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, token: 't', env: {} });
  });
  afterEach(async () => {
    for (const r of open.splice(0)) r.destroy();
    await new Promise((r) => server.close(r));
  });

  const drain = async (it: AsyncIterable<unknown>) => {
    let n = 0;
    for await (const _ of it) if (++n > 40) throw new Error('followed on after the abort');
    return n;
  };

  it('ends /events, an egress follow and a log follow', async () => {
    for (const follow of [
      (signal: AbortSignal) => client.events({ signal }),
      (signal: AbortSignal) => client.followEgress('g', { signal }),
      (signal: AbortSignal) => client.logs('g', { follow: true, signal }),
    ]) {
      const ac = new AbortController();
      setTimeout(() => ac.abort(), 50);
      expect(await drain(follow(ac.signal))).to.equal(0);
    }
  });

  it('ends a process output follow and a watch', async () => {
    for (const follow of [
      (signal: AbortSignal) => client.processOutput('g', 'p1', { signal }),
      (signal: AbortSignal) => client.watch('g', { path: '/tmp' }, { signal }),
    ]) {
      const ac = new AbortController();
      setTimeout(() => ac.abort(), 50);
      expect(await drain(follow(ac.signal))).to.equal(0);
    }
  });
});
