import { expect } from 'chai';
import express, { type Response } from 'express';
import { request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { pumpTo } from '../../../../src/adapters/http-kit/ndjson.js';
import { sendStream } from '../../../../src/adapters/http-kit/route.js';
import { onceGone } from '../../../../src/adapters/http-kit/streams.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A server whose one route waits until its caller has left (as a handler waits for the guest),
 * then hands the response to `answer`; resolves with what `answer` resolved with.
 */
async function afterCallerLeft<T>(answer: (res: Response) => Promise<T>): Promise<T> {
  let done!: (v: T) => void;
  const result = new Promise<T>((r) => (done = r));
  let arrived!: () => void;
  const here = new Promise<void>((r) => (arrived = r));
  const app = express();
  app.get('/', (req, res) => {
    arrived();
    req.once('close', () => void sleep(50).then(() => answer(res).then(done)));
  });
  const server: Server = await new Promise((r) => {
    const s = app.listen(0, '127.0.0.1', () => r(s));
  });
  try {
    const call = request({ port: (server.address() as AddressInfo).port, path: '/' });
    call.on('error', () => undefined);
    call.end();
    // the caller leaves once the server has its call (on a loaded host that may take a while)
    await here;
    call.destroy();
    return await Promise.race([
      result,
      sleep(2000).then(() => {
        throw new Error('the answer waited on for a caller that had left');
      }),
    ]);
  } finally {
    server.closeAllConnections();
    server.close();
  }
}

describe('http-kit: a caller gone while its answer was being made', function () {
  this.timeout(10_000);

  it('pumpTo calls onGone and reads no chunk (a follow of a quiet stream would wait for one forever)', async () => {
    let pulled = 0;
    const never = {
      [Symbol.asyncIterator]: () => ({
        next: () => {
          pulled++;
          return new Promise<IteratorResult<string>>(() => undefined);
        },
        return: () => Promise.resolve({ done: true as const, value: undefined }),
      }),
    };
    let gone = 0;
    await afterCallerLeft((res) => pumpTo(res, never, () => gone++));
    expect(gone, 'onGone').to.be.greaterThan(0);
    expect(pulled, 'no chunk asked for').to.equal(0);
  });

  it("sendStream lets go of the body (a guest's download left open otherwise)", async () => {
    const body = new Readable({ read: () => undefined });
    await afterCallerLeft(async (res) => {
      sendStream(res, { name: 'f', tar: false, size: 10, body });
      await sleep(20);
    });
    expect(body.destroyed).to.equal(true);
  });

  it('onceGone runs at once for a caller gone already, on close for one that leaves, never after a whole answer', async () => {
    expect(await afterCallerLeft(async (res) => new Promise<boolean>((r) => onceGone(res, () => r(true))))).to.equal(
      true,
    );
    const app = express();
    const calls: string[] = [];
    app.get('/:how', (req, res) => {
      onceGone(res, () => calls.push(req.params.how));
      if (req.params.how === 'whole') res.end('ok');
    });
    const server: Server = await new Promise((r) => {
      const s = app.listen(0, '127.0.0.1', () => r(s));
    });
    const port = (server.address() as AddressInfo).port;
    try {
      await new Promise<void>((r) => request({ port, path: '/whole' }, (res) => res.resume().on('end', r)).end());
      const left = request({ port, path: '/left' });
      left.on('error', () => undefined);
      left.end();
      await sleep(50);
      left.destroy();
      await sleep(100);
      expect(calls).to.deep.equal(['left']);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});
