import { expect } from 'chai';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import { HttpGuestAgent } from '../../../../src/adapters/guest-link/http-guest-agent.js';
import type { Connector } from '../../../../src/adapters/guest-link/transport.js';
import { AgentFailureError, AgentUnavailableError, NotFoundError } from '../../../../src/domain/errors.js';

type Answer = (ws: WebSocket, m: { id: number; query?: string; cancel?: boolean }) => void;

/**
 * A stand-in agent: the exec channel answers with `answer` (unless `channel` is false, when the
 * upgrade gets a 404 like an agent from before the channel); POST /exec answers over HTTP.
 */
async function standIn(o: {
  answer?: Answer;
  channel?: boolean;
  http?: (req: IncomingMessage, res: ServerResponse) => void;
}) {
  const wss = new WebSocketServer({ noServer: true });
  const seen: { upgrades: number; posts: string[]; messages: { id: number; query?: string; cancel?: boolean }[] } = {
    upgrades: 0,
    posts: [],
    messages: [],
  };
  const srv: Server = createServer((req, res) => {
    seen.posts.push(req.url ?? '');
    if (o.http) return o.http(req, res);
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"stdout":"over http","stderr":"","exit_code":0}');
  });
  srv.on('upgrade', (req, socket, head) => {
    seen.upgrades++;
    if (o.channel === false || req.url !== '/exec/channel')
      return void socket.end('HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}');
    wss.handleUpgrade(req, socket, head, (ws) =>
      ws.on('message', (d) => {
        const m = JSON.parse(String(d)) as { id: number; query?: string; cancel?: boolean };
        seen.messages.push(m);
        o.answer?.(ws, m);
      }),
    );
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as AddressInfo).port;
  return {
    ep: { host: '127.0.0.1', port },
    seen,
    stop: () => {
      srv.closeAllConnections();
      srv.close();
      for (const c of wss.clients) c.terminate();
    },
  };
}

/** The error a call fails with; a call that succeeds fails the test. */
const failure = (p: Promise<unknown>): Promise<Error> =>
  p.then(
    () => {
      throw new Error('the call succeeded');
    },
    (e: Error) => e,
  );

const ok = (ws: WebSocket, m: { id: number; query?: string }) =>
  ws.send(JSON.stringify({ id: m.id, result: { stdout: m.query ?? '', stderr: '', exit_code: 0 } }));

describe('adapters/guest-link exec channel (buffered execs over one WebSocket)', function () {
  this.timeout(15_000);

  it('carries execs without stdin as numbered messages on one connection, answers matched by id', async () => {
    const a = await standIn({
      // Answers out of order: the second call is answered first.
      answer: (ws, m) => {
        if (m.id === 1) setTimeout(() => ok(ws, m), 100);
        else ok(ws, m);
      },
    });
    let connections = 0;
    const counting: Connector = (ep) => {
      connections++;
      return connect({ host: ep.host, port: ep.port });
    };
    const agent = new HttpGuestAgent(counting);
    try {
      const [r1, r2] = await Promise.all([
        agent.exec(a.ep, { cmd: 'echo', args: ['a b', 'ü'] }),
        agent.exec(a.ep, { cmd: 'true', args: [], cwd: '/tmp', timeoutMs: 5000 }),
      ]);
      expect(new URLSearchParams(r1.stdout).getAll('args')).to.deep.equal(['a b', 'ü']);
      expect(r2.stdout).to.equal('cmd=true&buffered=true&cwd=%2Ftmp&timeout=5s');
      for (let i = 0; i < 10; i++)
        expect((await agent.exec(a.ep, { cmd: 'x', args: [String(i)] })).stdout).to.include(`args=${i}`);
      expect(a.seen.upgrades).to.equal(1);
      expect(connections).to.equal(1);
      expect(a.seen.posts, 'no HTTP exec').to.deep.equal([]);
      expect(a.seen.messages.map((m) => m.id)).to.deep.equal([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    } finally {
      agent.close();
      a.stop();
    }
  });

  it('uses HTTP for an exec with stdin, and for an agent without the channel (asked once, not every call)', async () => {
    const a = await standIn({ channel: false });
    const agent = new HttpGuestAgent();
    try {
      for (let i = 0; i < 3; i++)
        expect((await agent.exec(a.ep, { cmd: 'true', args: [] })).stdout).to.equal('over http');
      expect(a.seen.upgrades).to.equal(1);
      expect(a.seen.posts).to.have.length(3);
    } finally {
      agent.close();
      a.stop();
    }
  });

  it('maps error answers by their code, and a channel that closes fails its calls as unavailable', async () => {
    const a = await standIn({
      answer: (ws, m) => {
        if (m.query?.startsWith('cmd=missing'))
          ws.send(JSON.stringify({ id: m.id, status: 404, error: { error: 'no such dir', code: 'not_found' } }));
        else if (m.query?.startsWith('cmd=crash'))
          ws.send(JSON.stringify({ id: m.id, status: 500, error: { error: 'boom', code: 'internal' } }));
        else if (m.query?.startsWith('cmd=hangup')) ws.terminate();
      },
    });
    const agent = new HttpGuestAgent();
    try {
      const nf = await failure(agent.exec(a.ep, { cmd: 'missing', args: [] }));
      expect(nf).to.be.instanceOf(NotFoundError);
      expect(nf.message).to.equal('no such dir');
      expect(await failure(agent.exec(a.ep, { cmd: 'crash', args: [] }))).to.be.instanceOf(AgentFailureError);
      const gone = await failure(agent.exec(a.ep, { cmd: 'hangup', args: [] }));
      expect(gone).to.be.instanceOf(AgentUnavailableError);
      expect(gone.message).to.match(/exec channel closed|ECONNRESET/);
      // The next call opens a new channel.
      expect(await failure(agent.exec(a.ep, { cmd: 'missing', args: [] }))).to.be.instanceOf(NotFoundError);
      expect(a.seen.upgrades).to.equal(2);
    } finally {
      agent.close();
      a.stop();
    }
  });

  it('sends a cancel when the caller leaves, and drops the late answer', async () => {
    const a = await standIn({
      answer: (ws, m) => {
        if (!m.cancel) setTimeout(() => ok(ws, m), 600);
      },
    });
    const agent = new HttpGuestAgent();
    try {
      const leave = new AbortController();
      setTimeout(() => leave.abort(), 100);
      const left = await failure(agent.exec(a.ep, { cmd: 'sleep', args: ['9'] }, undefined, leave.signal));
      expect(left).to.be.instanceOf(AgentUnavailableError);
      expect(left.message).to.equal('the caller went away');
      for (let i = 0; i < 50 && !a.seen.messages.some((m) => m.cancel); i++)
        await new Promise((r) => setTimeout(r, 20));
      expect(a.seen.messages).to.deep.include({ id: 1, cancel: true });
      // The late answer for id 1 arrives while id 2 waits, and is not taken for it.
      const r = await agent.exec(a.ep, { cmd: 'two', args: [] });
      expect(r.stdout).to.match(/^cmd=two/);
    } finally {
      agent.close();
      a.stop();
    }
  });

  it('treats a lying agent as failed: garbage, a result of the wrong shape, an answer over the cap', async () => {
    const answers: Record<string, (ws: WebSocket, id: number) => void> = {
      garbage: (ws) => ws.send('SSH-2.0-OpenSSH'),
      shape: (ws, id) => ws.send(JSON.stringify({ id, result: { stdout: 1, stderr: '', exit_code: 0 } })),
      binary: (ws, id) =>
        ws.send(Buffer.from(JSON.stringify({ id, result: { stdout: '', stderr: '', exit_code: 0 } })), {
          binary: true,
        }),
      huge: (ws, id) =>
        ws.send(JSON.stringify({ id, result: { stdout: 'a'.repeat(65 << 20), stderr: '', exit_code: 0 } })),
    };
    const a = await standIn({
      answer: (ws, m) => answers[String(new URLSearchParams(m.query).get('cmd'))]?.(ws, m.id),
    });
    const agent = new HttpGuestAgent();
    try {
      for (const cmd of ['garbage', 'shape', 'binary']) {
        const e = await failure(agent.exec(a.ep, { cmd, args: [] }));
        expect(e, cmd).to.be.instanceOf(AgentFailureError);
        expect(e.message, cmd).to.match(/sent a bad exec channel answer/);
      }
      const huge = await failure(agent.exec(a.ep, { cmd: 'huge', args: [] }));
      expect(huge).to.be.instanceOf(AgentFailureError);
      expect(huge.message).to.match(/answered more than 67108864 bytes; the answer was dropped/);
    } finally {
      agent.close();
      a.stop();
    }
  });
});

describe('adapters/guest-link: the daemon-wide budget for guest answers', function () {
  this.timeout(20_000);

  it('drops an exec channel answer that would pass the budget with 503 and Retry-After, gives the bytes back, and serves the next', async () => {
    const big = 'x'.repeat(3 * 2 ** 20);
    const agent = standIn({
      answer: (ws, m) => {
        if (m.cancel) return;
        const small = m.query?.includes('small');
        ws.send(JSON.stringify({ id: m.id, result: { stdout: small ? 'ok' : big, stderr: '', exit_code: 0 } }));
      },
    });
    const s = await agent;
    try {
      const guest = new HttpGuestAgent(undefined, { replyBudgetMb: 2 });
      const exec = (cmd: string) => guest.exec(s.ep, { cmd, args: [] });
      const err = await failure(exec('big'));
      expect(err).to.be.instanceOf(AgentUnavailableError);
      expect((err as AgentUnavailableError).retryAfterS).to.equal(1);
      expect(err.message).to.match(/guest_reply_budget_mb/);
      expect(guest.http.budget.inFlight, 'bytes given back').to.equal(0);
      expect((await exec('small')).stdout).to.equal('ok');
      // Without a budget the same answer passes.
      expect((await new HttpGuestAgent().exec(s.ep, { cmd: 'big', args: [] })).stdout.length).to.equal(big.length);
    } finally {
      s.stop();
    }
  });

  it('counts answers read over HTTP together: one in flight leaves too little for the next, and all come back', async () => {
    const MiB = 2 ** 20;
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const srv = createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      if (req.url?.startsWith('/fs/readdir?path=%2Fslow')) {
        // Half of a 1.5 MiB answer now, the rest when the test says.
        res.write('[' + '"a",'.repeat((0.75 * MiB) / 4));
        void held.then(() => res.end('"z"]'));
      } else res.end('[' + '"b",'.repeat((0.75 * MiB) / 4) + '"z"]');
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const ep = { host: '127.0.0.1', port: (srv.address() as AddressInfo).port };
    try {
      const guest = new HttpGuestAgent(undefined, { replyBudgetMb: 1 });
      const slow = guest.fs(ep, { op: 'readdir', path: '/slow' });
      while (guest.http.budget.inFlight < 0.7 * MiB) await new Promise((r) => setTimeout(r, 10));
      const refused = await failure(guest.fs(ep, { op: 'readdir', path: '/other' }));
      expect(refused).to.be.instanceOf(AgentUnavailableError);
      release();
      expect(await slow).to.have.length((0.75 * MiB) / 4 + 1);
      expect(guest.http.budget.inFlight).to.equal(0);
    } finally {
      srv.closeAllConnections();
      srv.close();
    }
  });
});
