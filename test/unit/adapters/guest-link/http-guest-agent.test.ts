import { expect } from 'chai';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { WebSocketServer } from 'ws';
import { HttpGuestAgent } from '../../../../src/adapters/guest-link/http-guest-agent.js';
import { pickConnector, type Connector } from '../../../../src/adapters/guest-link/transport.js';
import {
  AgentFailureError,
  AgentUnavailableError,
  AlreadyExistsError,
  InvalidArgumentError,
  NotFoundError,
  NotSupportedError,
} from '../../../../src/domain/errors.js';

function server(handler: Parameters<typeof createServer>[1]): Promise<{ port: number; srv: Server }> {
  const srv = createServer(handler);
  return new Promise((r) => srv.listen(0, '127.0.0.1', () => r({ port: (srv.address() as AddressInfo).port, srv })));
}

describe('adapters/guest-link/HttpGuestAgent', () => {
  it('maps transport failures to AgentUnavailable and answers to the right domain errors', async () => {
    const agent = new HttpGuestAgent();
    const refused = await agent.health({ host: '127.0.0.1', port: 1 }).catch((e) => e);
    expect(refused).to.be.instanceOf(AgentUnavailableError);
    const statuses: Record<string, [number, string]> = {
      '/fs/stat?path=%2Fa': [404, '{"error":"no such","code":"not_found"}'],
      '/fs/readdir?path=%2Fa': [400, '{"error":"bad","code":"invalid_argument"}'],
      // The code decides, not the status: a 404 that says internal is the agent's failure, a 500 that says not_found is not.
      '/fs/stat?path=%2Fb': [404, '{"error":"oops","code":"internal"}'],
      '/fs/stat?path=%2Fc': [500, '{"error":"gone","code":"not_found"}'],
      '/fs/readdir?path=%2Fb': [400, '{"error":"no code"}'],
      '/stats': [500, 'kaboom'],
      '/health': [200, 'not json'],
      '/readiness': [418, 'teapot'],
    };
    const { port, srv } = await server((req, res) => {
      if (req.url === '/fs/mkdir') return void res.writeHead(409).end('{"error":"exists","code":"already_exists"}');
      const [status, body] = statuses[req.url ?? ''] ?? [200, '{}'];
      res.writeHead(status).end(body);
    });
    try {
      const ep = { host: '127.0.0.1', port };
      expect(await agent.fs(ep, { op: 'stat', path: '/a' }).catch((e) => e)).to.be.instanceOf(NotFoundError);
      expect(await agent.fs(ep, { op: 'readdir', path: '/a' }).catch((e) => e)).to.be.instanceOf(InvalidArgumentError);
      expect(await agent.fs(ep, { op: 'mkdir', path: '/a' }).catch((e) => e)).to.be.instanceOf(AlreadyExistsError);
      expect(await agent.fs(ep, { op: 'stat', path: '/b' }).catch((e) => e)).to.be.instanceOf(AgentFailureError);
      expect(await agent.fs(ep, { op: 'stat', path: '/c' }).catch((e) => e)).to.be.instanceOf(NotFoundError);
      expect(await agent.fs(ep, { op: 'readdir', path: '/b' }).catch((e) => e)).to.be.instanceOf(AgentFailureError);
      expect(await agent.stats(ep).catch((e) => e)).to.be.instanceOf(AgentFailureError);
      expect(await agent.health(ep).catch((e) => e)).to.be.instanceOf(AgentFailureError);
      expect(await agent.readiness(ep).catch((e) => e)).to.be.instanceOf(AgentFailureError);
    } finally {
      srv.close();
      agent.close();
    }
  });

  it('sends an exec as a named user, or with env, only to an agent whose health says it knows them (an older one would run it as root, or without the variables)', async () => {
    let features: string[] | undefined;
    let healths = 0;
    const execs: string[] = [];
    const { port, srv } = await server((req, res) => {
      if (req.url === '/health' && ++healths)
        return void res.end(
          JSON.stringify({
            hostname: 'g',
            agent_version: '0',
            agent_uptime_sec: 1,
            userdata_ran: true,
            readiness: {},
            features,
          }),
        );
      execs.push(req.url ?? '');
      req.resume();
      res.end(JSON.stringify({ stdout: 'svc\n', stderr: '', exit_code: 0 }));
    });
    const agent = new HttpGuestAgent();
    const ep = { host: '127.0.0.1', port };
    const req = { cmd: 'id', args: ['-un'], user: 'svc' };
    try {
      const old = await agent.exec(ep, req, Readable.from([])).catch((e) => e);
      expect(old)
        .to.be.instanceOf(NotSupportedError)
        .with.property('message')
        .that.matches(/only by uid .*svc agent deploy/);
      const frames = agent.execStream(ep, req)[Symbol.asyncIterator]();
      expect(await frames.next().catch((e) => e)).to.be.instanceOf(NotSupportedError);
      expect(execs, 'nothing was run').to.deep.equal([]);
      features = ['exec_user'];
      expect((await agent.exec(ep, req, Readable.from([]))).stdout).to.equal('svc\n');
      expect(execs[0]).to.match(/^\/exec\?.*&user=svc/);
      // without a user, no health is asked first
      const asked = healths;
      await agent.exec(ep, { cmd: 'true', args: [] }, Readable.from([]));
      expect(execs).to.have.length(2);
      expect(healths).to.equal(asked);
      // env goes only to an agent that says exec_env: an older one would run the command without it
      const withEnv = { cmd: 'printenv', args: ['A'], env: { A: 'x=1&y' } };
      expect(await agent.exec(ep, withEnv, Readable.from([])).catch((e) => e))
        .to.be.instanceOf(NotSupportedError)
        .with.property('message')
        .that.matches(/sets no env for an exec .*svc agent deploy/);
      expect(execs).to.have.length(2);
      features = ['exec_user', 'exec_env'];
      await agent.exec(ep, withEnv, Readable.from([]));
      expect(new URL(execs[2], 'http://a').searchParams.getAll('env')).to.deep.equal(['A=x=1&y']);
      // a command in a terminal too: an older agent would open a login shell instead
      expect(await agent.shell(ep, { cmd: 'top' }).catch((e) => e))
        .to.be.instanceOf(NotSupportedError)
        .with.property('message')
        .that.matches(/opens only a login shell in a terminal .*svc agent deploy/);
      expect(execs, 'no terminal was asked for').to.have.length(3);
    } finally {
      srv.closeAllConnections();
      srv.close();
      agent.close();
    }
  });

  it("keeps a terminal's output and end that come before anyone listens (a command quicker than the join)", async () => {
    const { port, srv } = await server((_req, res) => res.end());
    const wss = new WebSocketServer({ noServer: true });
    const asked: string[] = [];
    srv.on('upgrade', (req, socket, head) =>
      wss.handleUpgrade(req, socket, head, (ws) => {
        asked.push(req.url ?? '');
        ws.send(Buffer.from('quick '), { binary: true });
        ws.send(Buffer.from('output'), { binary: true });
        ws.send(JSON.stringify({ type: 'exit', exit_code: 4 }));
        ws.close(1000);
      }),
    );
    const agent = new HttpGuestAgent();
    try {
      const t = await agent.shell({ host: '127.0.0.1', port }, { cols: 90, user: 'svc' });
      await new Promise((r) => setTimeout(r, 200));
      const got: Buffer[] = [];
      t.onData((d) => got.push(d));
      const code = await new Promise((r) => t.onExit(r));
      expect(code).to.equal(4);
      expect(Buffer.concat(got).toString()).to.equal('quick output');
      expect(asked).to.deep.equal(['/shell?cols=90&user=svc']);
    } finally {
      wss.close();
      srv.closeAllConnections();
      srv.close();
      agent.close();
    }
  });

  it('times out an agent that accepts but never answers', async () => {
    const { port, srv } = await server(() => undefined);
    const agent = new HttpGuestAgent();
    try {
      const t0 = Date.now();
      expect(await agent.health({ host: '127.0.0.1', port }, 300).catch((e) => e)).to.be.instanceOf(
        AgentUnavailableError,
      );
      expect(Date.now() - t0).to.be.below(2000);
    } finally {
      srv.closeAllConnections();
      srv.close();
      agent.close();
    }
  });

  it('sends requests for vsock endpoints through the vsock connector, and TCP ones over TCP', async () => {
    const { port, srv } = await server((req, res) =>
      res.end(
        JSON.stringify({
          hostname: req.url,
          agent_version: '1',
          agent_uptime_sec: 0,
          userdata_ran: false,
          readiness: {},
        }),
      ),
    );
    const used: string[] = [];
    // Stands in for socat: records the CID and carries the bytes over TCP to the test server.
    const fakeVsock: Connector = (ep) => {
      used.push(`vsock:${ep.cid}:${ep.port}`);
      return connect(port, '127.0.0.1');
    };
    try {
      const auto = new HttpGuestAgent(pickConnector('auto', fakeVsock));
      expect((await auto.health({ host: '127.0.0.1', port: 1, cid: 42 })).hostname).to.equal('/health');
      expect(used).to.deep.equal(['vsock:42:7475']);
      expect((await auto.health({ host: '127.0.0.1', port })).agent_version).to.equal('1');
      expect(used).to.have.length(1);
      const tcpOnly = new HttpGuestAgent(pickConnector('tcp', fakeVsock));
      await tcpOnly.health({ host: '127.0.0.1', port, cid: 42 });
      expect(used).to.have.length(1);
      auto.close();
      tcpOnly.close();
    } finally {
      srv.close();
    }
  });
});

/** A guest agent that floods, stalls and lies: the daemon's reads stay bounded and fail clearly. */
describe('adapters/guest-link/HttpGuestAgent against a hostile agent', function () {
  this.timeout(20_000);
  let srv: Server;
  let ep: { host: string; port: number };
  const endless = (res: import('node:http').ServerResponse, line = false) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    const chunk = Buffer.alloc(64 * 1024, line ? 'a' : '[');
    const more = () => {
      while (res.write(chunk));
    };
    res.on('drain', more);
    res.on('close', () => res.off('drain', more));
    more();
  };
  before(async () => {
    const s = await server((req, res) => {
      const url = req.url ?? '';
      if (url === '/stats' || url.startsWith('/fs/stat')) return endless(res);
      if (url === '/health') return void res.writeHead(200, { 'content-length': '100' }).write('{"sta'); // then stalls
      if (url.startsWith('/exec') && url.includes('buffered=false')) {
        if (url.includes('cmd=flood')) return endless(res, true);
        if (url.includes('cmd=cut')) {
          res.writeHead(200).write('{"type":"started","t":"x","pid":1}\n');
          return void setTimeout(() => res.socket?.destroy(), 50);
        }
        return void res.writeHead(200).end('{"type":"stdout","data":"x"}\n{"type":"surprise"}\n');
      }
      if (url.startsWith('/exec')) return void res.writeHead(200, { 'content-length': String(200 << 20) }).end();
      res.writeHead(200).end('{}');
    });
    srv = s.srv;
    ep = { host: '127.0.0.1', port: s.port };
  });
  after(() => {
    srv.closeAllConnections();
    srv.close();
  });

  it('drops an endless answer at its cap with a clear error, and the daemon does not grow', async () => {
    const agent = new HttpGuestAgent();
    const before = process.memoryUsage().rss;
    for (let i = 0; i < 5; i++) {
      const e = await agent.stats(ep).catch((x: Error) => x);
      expect(e).to.be.instanceOf(AgentFailureError);
      expect((e as Error).message).to.match(/answered more than 1048576 bytes; the answer was dropped/);
    }
    expect(await agent.fs(ep, { op: 'stat', path: '/x' }).catch((x: Error) => x.message)).to.match(
      /more than 1048576 bytes/,
    );
    expect(process.memoryUsage().rss - before).to.be.below(64 << 20);
    agent.close();
  });

  it('refuses an answer that declares more than the cap before reading it', async () => {
    const agent = new HttpGuestAgent();
    const e = await agent.exec(ep, { cmd: 'true', args: [] }).catch((x: Error) => x);
    expect((e as Error).message).to.match(/answered more than 67108864 bytes/);
    agent.close();
  });

  it('cuts off an answer that stalls past the deadline', async () => {
    const agent = new HttpGuestAgent();
    const t0 = Date.now();
    const e = await agent.health(ep, 300).catch((x: Error) => x);
    expect(e).to.be.instanceOf(AgentFailureError);
    expect((e as Error).message).to.match(/did not finish its answer within 300 ms|broke off/);
    expect(Date.now() - t0).to.be.below(3000);
    agent.close();
  });

  it('fails a streamed exec on an endless line or a frame it does not know', async () => {
    const agent = new HttpGuestAgent();
    const drain = async (cmd: string) => {
      const seen: string[] = [];
      try {
        for await (const f of agent.execStream(ep, { cmd, args: [] })) seen.push(f.type);
        return seen;
      } catch (err) {
        return `${seen.join(',')}|${(err as Error).message}`;
      }
    };
    expect(await drain('flood')).to.match(/^\|guest agent sent an exec frame longer than 4194304 bytes/);
    expect(await drain('lies')).to.match(/^stdout\|guest agent sent a bad exec frame/);
    // A stream the guest cuts is the agent being unavailable (a domain error), not a raw socket error.
    const cut = agent.execStream(ep, { cmd: 'cut', args: [] })[Symbol.asyncIterator]();
    expect((await cut.next()).value).to.include({ type: 'started' });
    const err = await cut.next().catch((e: Error) => e);
    expect(err).to.be.instanceOf(AgentUnavailableError);
    expect((err as Error).message).to.match(/broke off the exec stream/);
    agent.close();
  });
});
