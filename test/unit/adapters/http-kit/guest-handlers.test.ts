import { expect } from 'chai';
import express from 'express';
import type { AddressInfo } from 'node:net';
import { execHandler } from '../../../../src/adapters/http-kit/guest-handlers.js';
import type { ExecFrame } from '../../../../src/domain/agent.js';
import { AgentUnavailableError } from '../../../../src/domain/errors.js';

const t = '2026-01-01T00:00:00.000Z';

/** Serves POST /exec with `frames` as the streamed exec's source, and answers what a client reads. */
async function streamed(frames: () => AsyncIterable<ExecFrame>): Promise<{ status: number; lines: ExecFrame[] }> {
  const app = express();
  const h = execHandler({ buffered: async () => ({}), stream: frames });
  app.post('/exec', (req, res, next) => void Promise.resolve(h(req, res)).catch(next));
  const srv = app.listen(0, '127.0.0.1');
  await new Promise((r) => srv.once('listening', r));
  try {
    const r = await fetch(`http://127.0.0.1:${(srv.address() as AddressInfo).port}/exec?cmd=x&buffered=false`, {
      method: 'POST',
    });
    const text = await r.text();
    return {
      status: r.status,
      lines: text
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as ExecFrame),
    };
  } finally {
    srv.close();
  }
}

describe('adapters/http-kit execHandler: a streamed exec the guest breaks', () => {
  it('ends with an error frame carrying the code, never as if it were whole', async () => {
    const r = await streamed(async function* () {
      yield { type: 'started', t, pid: 7 };
      yield { type: 'stdout', t, data: 'half' };
      throw new AgentUnavailableError('guest agent broke off the exec stream: aborted');
    });
    expect(r.status).to.equal(200);
    expect(r.lines.map((f) => f.type)).to.deep.equal(['started', 'stdout', 'error']);
    expect(r.lines[2]).to.include({
      code: 'agent_unavailable',
      error: 'guest agent broke off the exec stream: aborted',
    });
  });

  it('passes a whole stream through untouched', async () => {
    const r = await streamed(async function* () {
      yield { type: 'started', t, pid: 7 };
      yield { type: 'exit', t, exit_code: 0 };
    });
    expect(r.lines.map((f) => f.type)).to.deep.equal(['started', 'exit']);
  });
});
