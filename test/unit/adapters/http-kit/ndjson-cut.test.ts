import { expect } from 'chai';
import express from 'express';
import { request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeNdjson } from '../../../../src/adapters/http-kit/ndjson.js';

/**
 * What a caller of a route that streams `events` sees: the lines it got, and whether the answer
 * ended whole or was cut. The route handles a failure as answerError does once an answer began.
 */
async function streamed(
  events: () => AsyncIterable<object>,
): Promise<{ lines: string[]; whole: boolean; endedOnFailure?: boolean }> {
  let endedOnFailure: boolean | undefined;
  const app = express();
  app.get('/', (_req, res) => {
    writeNdjson(res, events()).catch(() => {
      endedOnFailure = res.writableEnded;
      res.destroy();
    });
  });
  const server: Server = await new Promise((r) => {
    const s = app.listen(0, '127.0.0.1', () => r(s));
  });
  try {
    const got = await new Promise<{ body: string; whole: boolean }>((resolve) => {
      const call = request({ port: (server.address() as AddressInfo).port, path: '/' }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ body, whole: true }));
        res.on('error', () => resolve({ body, whole: false }));
        res.on('aborted', () => resolve({ body, whole: false }));
      });
      call.on('error', () => resolve({ body: '', whole: false }));
      call.end();
    });
    return { lines: got.body.split('\n').filter(Boolean), whole: got.whole, endedOnFailure };
  } finally {
    server.closeAllConnections();
    server.close();
  }
}

describe('http-kit: a streamed answer that fails after it began', function () {
  this.timeout(10_000);

  it('is cut, not ended: its reader can tell it broke off (and a watch comes back)', async () => {
    const got = await streamed(async function* () {
      yield { n: 1 };
      await new Promise((r) => setTimeout(r, 20));
      throw new Error('the agent went away');
    });
    expect(got.lines).to.deep.equal(['{"n":1}']);
    expect(got.endedOnFailure, 'left for the error handling').to.equal(false);
    expect(got.whole, 'cut').to.equal(false);
  });

  it('ends whole when its events end', async () => {
    const got = await streamed(async function* () {
      yield { n: 1 };
      yield { n: 2 };
    });
    expect(got).to.deep.include({ lines: ['{"n":1}', '{"n":2}'], whole: true });
  });
});
