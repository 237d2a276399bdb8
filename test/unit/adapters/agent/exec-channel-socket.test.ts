import { expect } from 'chai';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import WebSocket from 'ws';
import { ExecChannelSocket } from '../../../../src/adapters/agent/exec-channel-socket.js';
import type { ExecService } from '../../../../src/app/agent/exec-service.js';
import type { ExecRequest } from '../../../../src/domain/agent.js';
import { poll } from '../../../helpers/wait.js';

/** An exec that takes `ms` from its `sleep` argument (0 without), and records what it was asked and whether it was killed. */
function slowExec() {
  const seen: { req: ExecRequest; killed: boolean }[] = [];
  const exec = {
    buffered: (req: ExecRequest, _stdin: unknown, gone?: AbortSignal) =>
      new Promise((resolve) => {
        const rec = { req, killed: false };
        seen.push(rec);
        const t = setTimeout(
          () => resolve({ stdout: req.args.join(' '), stderr: '', exit_code: 0 }),
          Number(req.args[0] ?? 0),
        );
        gone?.addEventListener('abort', () => {
          rec.killed = true;
          clearTimeout(t);
          resolve({ stdout: '', stderr: '', exit_code: -1, error: 'killed' });
        });
      }),
  };
  return { exec: exec as unknown as ExecService, seen };
}

async function serve(socket: ExecChannelSocket): Promise<{ srv: Server; url: string }> {
  const srv = createServer((_req, res) => res.end());
  srv.on('upgrade', (req, s, head) => socket.handleUpgrade(req, s, head));
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return { srv, url: `ws://127.0.0.1:${(srv.address() as AddressInfo).port}/exec/channel` };
}

const opened = async (url: string) => {
  const ws = new WebSocket(url);
  await new Promise((r) => ws.once('open', r));
  const answers: Record<string, unknown>[] = [];
  ws.on('message', (d) => answers.push(JSON.parse(String(d)) as Record<string, unknown>));
  const closed = new Promise<number>((r) => ws.once('close', (code) => r(code)));
  return { ws, answers, closed };
};

describe('adapters/agent/ExecChannelSocket', () => {
  it('answers by id, maps a bad query to its 400, and kills a cancelled command', async () => {
    const { exec, seen } = slowExec();
    const { srv, url } = await serve(new ExecChannelSocket(exec));
    const c = await opened(url);
    try {
      c.ws.send(JSON.stringify({ id: 1, query: 'cmd=sleep&args=5000' }));
      c.ws.send(JSON.stringify({ id: 2, query: 'cmd=echo&args=40&args=b' }));
      c.ws.send(JSON.stringify({ id: 3, query: 'cmd=x&cwd=relative' }));
      await poll(() => c.answers.length >= 2, { ms: 1000, every: 10 });
      expect(c.answers).to.deep.equal([
        { id: 3, status: 400, error: { error: 'cwd must be an absolute path', code: 'invalid_argument' } },
        { id: 2, result: { stdout: '40 b', stderr: '', exit_code: 0 } },
      ]);
      c.ws.send(JSON.stringify({ id: 1, cancel: true }));
      await poll(() => c.answers.length >= 3, { ms: 1000, every: 10 });
      expect(seen[0].killed).to.equal(true);
      expect(c.answers[2]).to.deep.include({ id: 1 });
    } finally {
      c.ws.close();
      srv.close();
    }
  });

  it('closes an idle channel, but not while a command runs, and kills what runs when the socket goes', async () => {
    const { exec, seen } = slowExec();
    const { srv, url } = await serve(new ExecChannelSocket(exec, 150));
    try {
      const idle = await opened(url);
      const t0 = Date.now();
      await idle.closed;
      expect(Date.now() - t0).to.be.within(100, 2000);

      const busy = await opened(url);
      busy.ws.send(JSON.stringify({ id: 1, query: 'cmd=sleep&args=400' }));
      await new Promise((r) => setTimeout(r, 300));
      expect(busy.ws.readyState, 'open while the command runs').to.equal(WebSocket.OPEN);
      await busy.closed;
      expect(busy.answers).to.have.length(1);

      const leaving = await opened(url);
      leaving.ws.send(JSON.stringify({ id: 9, query: 'cmd=sleep&args=60000' }));
      await new Promise((r) => setTimeout(r, 50));
      leaving.ws.terminate();
      await poll(() => seen[1].killed, { ms: 1000, every: 10 });
      expect(seen.map((s) => s.killed)).to.deep.equal([false, true]);
    } finally {
      srv.close();
    }
  });
});
