import { expect } from 'chai';
import type { IncomingMessage } from 'node:http';
import { Duplex } from 'node:stream';
import { InvalidArgumentError, NotFoundError } from '../../../../src/domain/errors.js';
import { answeringUpgrade, decodedSegment, requestUrl } from '../../../../src/adapters/http-kit/terminal-socket.js';

/** A socket that keeps what is written to it; resolves `ended` with it. */
function socket(): { s: Duplex; ended: Promise<string> } {
  let text = '';
  let done!: (t: string) => void;
  const ended = new Promise<string>((r) => (done = r));
  const s = new Duplex({
    read: () => undefined,
    write: (c: Buffer, _e, cb) => {
      text += c.toString();
      cb();
    },
    final: (cb) => {
      done(text);
      cb();
    },
  });
  return { s, ended };
}

const req = (url: string) => ({ url, headers: {} }) as IncomingMessage;

describe('http-kit: upgrade handlers that throw', () => {
  it('answers what a handler throws or rejects with, in its status, instead of leaving it to stop the process', async () => {
    const sync = socket();
    answeringUpgrade(() => {
      throw new NotFoundError('no such route');
    })(req('/x'), sync.s, Buffer.alloc(0));
    expect(await sync.ended).to.match(/^HTTP\/1\.1 404 /);
    const later = socket();
    answeringUpgrade(async (r) => {
      await new Promise((resolve) => setTimeout(resolve, 5));
      requestUrl(r);
    })(req('http://['), later.s, Buffer.alloc(0));
    const text = await later.ended;
    expect(text).to.match(/^HTTP\/1\.1 400 /);
    expect(text).to.include('malformed request target');
  });

  it('reads a target and a path segment, and refuses malformed ones with a 400', () => {
    expect(requestUrl(req('/vms/a/shell?cols=80')).searchParams.get('cols')).to.equal('80');
    for (const url of ['http://[', 'http://%zz/', 'http://x:99999/'])
      expect(() => requestUrl(req(url)), url).to.throw(InvalidArgumentError);
    expect(decodedSegment('a%20b')).to.equal('a b');
    expect(() => decodedSegment('%zz')).to.throw(InvalidArgumentError, /malformed percent-encoding/);
  });
});
