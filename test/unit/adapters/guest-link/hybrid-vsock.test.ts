import { expect } from 'chai';
import { once } from 'node:events';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { hybridVsockConnector } from '../../../../src/adapters/guest-link/transport.js';
import { tempDir } from '../../../helpers/daemon.js';

/** A VMM's hybrid vsock socket: answers `CONNECT <port>` per `answer`, then echoes in upper case. */
async function vmm(
  answer: (line: string) => string | null,
): Promise<{ path: string; server: Server; lines: string[] }> {
  const path = join(tempDir('svc-hvsock-'), 'vsock.sock');
  const lines: string[] = [];
  const server = createServer((s: Socket) => {
    let buf = '';
    const onData = (d: Buffer) => {
      buf += d.toString('latin1');
      const nl = buf.indexOf('\n');
      if (nl < 0) return;
      s.off('data', onData);
      lines.push(buf.slice(0, nl));
      const reply = answer(buf.slice(0, nl));
      if (reply === null) return void s.destroy();
      s.write(reply);
      const rest = buf.slice(nl + 1);
      if (rest) s.write(rest.toUpperCase());
      s.on('data', (x: Buffer) => s.write(x.toString('latin1').toUpperCase()));
      s.on('end', () => s.end());
    };
    s.on('data', onData);
  });
  server.listen(path);
  await once(server, 'listening');
  return { path, server, lines };
}

async function readAll(s: NodeJS.ReadableStream): Promise<string> {
  let out = '';
  for await (const c of s) out += (c as Buffer).toString('latin1');
  return out;
}

describe('hybrid vsock connector', () => {
  it('sends CONNECT <port>, then carries the stream both ways (writes before the handshake wait for it)', async () => {
    const v = await vmm(() => 'OK 1073741824\n');
    const s = hybridVsockConnector({ host: '', port: 7475, socket: v.path });
    s.write('hello ');
    s.end('guest');
    expect(await readAll(s)).to.equal('HELLO GUEST');
    expect(v.lines).to.deep.equal(['CONNECT 7475']);
    v.server.close();
  });

  it('passes on bytes that came in the same read as the OK line', async () => {
    const v = await vmm(() => 'OK 5\nfirst ');
    const s = hybridVsockConnector({ host: '', port: 1, socket: v.path });
    s.end('second');
    expect(await readAll(s)).to.equal('first SECOND');
    v.server.close();
  });

  for (const [what, answer] of [
    ['a closed connection', () => null],
    ['an answer other than OK', () => 'NO\n'],
    ['no newline in 64 bytes', () => 'x'.repeat(100)],
  ] as const) {
    it(`takes ${what} for ECONNREFUSED`, async () => {
      const v = await vmm(answer);
      const s = hybridVsockConnector({ host: '', port: 7475, socket: v.path });
      s.on('data', () => undefined);
      const [err] = (await once(s, 'error')) as [NodeJS.ErrnoException];
      expect(err.code).to.equal('ECONNREFUSED');
      v.server.close();
    });
  }

  it('takes a missing socket (the VM is not running) for ECONNREFUSED', async () => {
    const s = hybridVsockConnector({ host: '', port: 7475, socket: join(tempDir('svc-hvsock-'), 'none.sock') });
    const [err] = (await once(s, 'error')) as [NodeJS.ErrnoException];
    expect(err.code).to.equal('ECONNREFUSED');
  });
});
