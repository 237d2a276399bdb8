import { expect } from 'chai';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { ensureServer, runCell } from '../../../../src/adapters/code-interpreter/guest-server.js';
import { SvcError, type SvcClient } from '../../../../src/adapters/client/svc-client.js';

describe('the code interpreter in a VM: a cell run over the port stream', () => {
  let server: Server;
  let answer: (body: string, res: import('node:http').ServerResponse) => void;
  let client: SvcClient;
  let closed: Promise<void>;

  before(async () => {
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => answer(body, res));
      closed = new Promise((r) => res.on('close', () => r()));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const port = (server.address() as AddressInfo).port;
    // the daemon's port stream, as a plain TCP connection to the stand-in server
    client = { openPort: async () => connect(port, '127.0.0.1') } as unknown as SvcClient;
  });
  after(() => server.close());

  it('posts the cell to /execute and reads its events in order', async () => {
    let got = '';
    answer = (body, res) => {
      got = body;
      // in pieces of 5 bytes, a line and a character (é) cut between them
      const sent = Buffer.from(
        '{"type":"stdout","text":"é\\n"}\n{"type":"result","text":"42","is_main_result":true}\n{"type":"end_of_execution"}\n',
      );
      const piece = (at: number): void => {
        if (at >= sent.length) return void res.end();
        res.write(sent.subarray(at, at + 5));
        setTimeout(() => piece(at + 5), 1);
      };
      piece(0);
    };
    const seen: unknown[] = [];
    const run = await runCell(
      client,
      'vm',
      { code: 'x * 7', env_vars: { K: 'v' } },
      { maxBytes: 1 << 20, onEvent: (e) => seen.push(e) },
    );
    expect(JSON.parse(got)).to.deep.equal({ code: 'x * 7', env_vars: { K: 'v' } });
    expect(seen).to.deep.equal(run.events);
    expect(run).to.deep.equal({
      cut: false,
      events: [
        { type: 'stdout', text: 'é\n' },
        { type: 'result', text: '42', is_main_result: true },
        { type: 'end_of_execution' },
      ],
    });
  });

  it('stops reading past maxBytes, keeps the whole lines before it, and goes away (the server interrupts the cell)', async () => {
    const line = `${JSON.stringify({ type: 'stdout', text: 'x'.repeat(1000) })}\n`;
    answer = (_body, res) => {
      res.write(line.repeat(3));
      setTimeout(() => res.write(line.repeat(50)), 20);
    };
    const run = await runCell(client, 'vm', { code: 'spam()' }, { maxBytes: 10_000 });
    expect(run.cut).to.equal(true);
    expect(run.events.length).to.be.within(3, 9);
    expect(run.events.every((e) => e.text === 'x'.repeat(1000))).to.equal(true);
    await closed; // the caller went away
  });

  it('goes away from a cell that runs past its timeout, saying so (the server interrupts it)', async () => {
    answer = (_body, res) => void res.write('{"type":"stdout","text":"working"}\n');
    const err = await runCell(client, 'vm', { code: 'while True: pass' }, { maxBytes: 1 << 20, timeoutS: 1 }).catch(
      (e: unknown) => e,
    );
    expect(err).to.be.instanceOf(Error).and.to.have.property('message', 'the cell ran past 1 s and was interrupted');
    await closed; // the caller went away
  });

  it('fails on a refusal (its message) and on a line that is not an event', async () => {
    answer = (_body, res) => void res.writeHead(400).end('{"error": "bad body"}');
    await runCell(client, 'vm', { code: '' }, { maxBytes: 1 << 20 }).then(
      () => expect.fail('a refusal resolved'),
      (err: Error) => expect(err.message).to.equal('the code interpreter refused the cell: {"error": "bad body"}'),
    );
    answer = (_body, res) => void res.end('{"type":"stdout","text":"a"}\nnot json\n');
    await runCell(client, 'vm', { code: '1' }, { maxBytes: 1 << 20 }).then(
      () => expect.fail('a bad line resolved'),
      (err: Error) => expect(err.message).to.match(/a line that is not one of its events: not json/),
    );
  });
});

describe('the code interpreter in a VM: started once', () => {
  /** A client whose VM has no interpreter yet; `started` answers its process start. */
  const clientWith = (started: () => Promise<unknown>, calls: string[]) =>
    ({
      process: async () => {
        calls.push('process');
        throw new SvcError(404, 'no process tagged e2b-code-interpreter', 'not_found');
      },
      stat: async () => ({ type: 'file' }),
      mkdir: async () => undefined,
      upload: async () => undefined,
      startProcess: async () => {
        calls.push('start');
        return started();
      },
      openPort: async () => {
        calls.push('open');
        return { destroy: () => undefined };
      },
    }) as unknown as SvcClient;

  it('starts it when none runs, and waits for the one another call started (its own start refused with 409)', async () => {
    const calls: string[] = [];
    await ensureServer(
      clientWith(async () => ({ id: 'p1' }), calls),
      'vm',
      'run_code',
    );
    expect(calls).to.deep.equal(['process', 'start', 'open']);
    const raced: string[] = [];
    await ensureServer(
      clientWith(async () => {
        throw new SvcError(409, 'a running process already has tag e2b-code-interpreter', 'already_exists');
      }, raced),
      'vm',
      'run_code',
    );
    expect(raced).to.deep.equal(['process', 'start', 'open']);
  });

  it('fails with the daemon’s word on any other refusal', async () => {
    const err = await ensureServer(
      clientWith(async () => {
        throw new SvcError(400, 'bad cwd', 'invalid_argument');
      }, []),
      'vm',
      'run_code',
    ).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(SvcError).and.to.have.property('message', 'bad cwd');
  });
});
