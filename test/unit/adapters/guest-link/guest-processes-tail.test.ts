import { expect } from 'chai';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { HttpGuestAgent } from '../../../../src/adapters/guest-link/http-guest-agent.js';
import { HttpGuestProcesses } from '../../../../src/adapters/guest-link/http-guest-processes.js';
import { PIECES_TYPE } from '../../../../src/adapters/http-kit/output-pieces.js';
import { NotSupportedError } from '../../../../src/domain/errors.js';
import type { OutputFrame } from '../../../../src/domain/processes.js';

/** A stand-in agent whose output answer is `lines` in output pieces; records the queries it got. */
async function standIn(lines: object[], asked: string[]): Promise<Server> {
  const srv = createServer((req, res) => {
    asked.push(req.url ?? '');
    res.writeHead(200, { 'content-type': PIECES_TYPE });
    for (const l of lines) {
      if ('data' in l) {
        const { stream, offset, data } = l as { stream: string; offset: number; data: string };
        res.write(`${JSON.stringify({ stream, offset, n: Buffer.byteLength(data) })}\n${data}`);
      } else res.write(`${JSON.stringify(l)}\n`);
    }
    res.end();
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return srv;
}

describe('adapters/guest-link/http-guest-processes: a tail read', () => {
  const end = { reason: 'exit', exit_code: 0, ended_at: '2026-12-04T00:00:00.000Z' };
  const agent = new HttpGuestAgent();
  const processes = new HttpGuestProcesses(agent.http);
  after(() => agent.http.close());

  const read = async (srv: Server, o: { tail?: number; from?: string }) => {
    const ep = { host: '127.0.0.1', port: (srv.address() as AddressInfo).port };
    const got: OutputFrame[] = [];
    for await (const f of await processes.output(ep, 'p1', { ...o, follow: false })) got.push(f);
    return got;
  };

  it('asks the agent for the tail and passes its start on first', async () => {
    const asked: string[] = [];
    const srv = await standIn(
      [{ start: { stdout: 4, stderr: 0 } }, { stream: 'stdout', offset: 4, data: 'b\n' }, end],
      asked,
    );
    try {
      expect(await read(srv, { tail: 1 })).to.deep.equal([
        { start: { stdout: 4, stderr: 0 } },
        { stream: 'stdout', offset: 4, data: 'b\n' },
        end,
      ]);
      expect(asked[0]).to.match(/[?&]tail=1(&|$)/);
    } finally {
      srv.close();
    }
  });

  it('refuses (NotSupported) an agent that ignores tail and would send everything from 0', async () => {
    const srv = await standIn([{ stream: 'stdout', offset: 0, data: 'a\nb\n' }, end], []);
    try {
      let err: unknown;
      await read(srv, { tail: 1 }).catch((e: unknown) => (err = e));
      expect(err).to.be.instanceOf(NotSupportedError);
      expect((err as Error).message).to.match(/does not read a process's output by lines/);
      // the same agent read from an offset is fine
      expect(await read(srv, { from: '0' })).to.have.length(2);
    } finally {
      srv.close();
    }
  });
});
