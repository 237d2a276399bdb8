import { expect } from 'chai';
import { cellResult, ensureServer, RUN_CODE_LIMITS } from '../../../../src/adapters/mcp/mcp-code-tools.js';
import { SvcError, type SvcClient } from '../../../../src/adapters/client/svc-client.js';
import { MCP_LIMITS } from '../../../../src/adapters/mcp/mcp-kit.js';
import type { CellEvent } from '../../../../src/adapters/code-interpreter/guest-server.js';

const png = (n: number) => Buffer.from(`picture ${n}`).toString('base64');
const textOf = (r: ReturnType<typeof cellResult>) => JSON.parse((r.content[0] as { text: string }).text);

describe('MCP run_code: a cell’s events as a tool result', () => {
  it('gives what was printed, the results in order with their pictures as images, and the error', () => {
    const events: CellEvent[] = [
      { type: 'stdout', text: 'a\n' },
      { type: 'stderr', text: 'warn\n' },
      { type: 'stdout', text: 'b\n' },
      { type: 'result', text: '<Figure size 640x480 with 1 Axes>', png: png(1), chart: { type: 'line' } },
      { type: 'result', text: '42', is_main_result: true },
      { type: 'error', name: 'NameError', value: "name 'y' is not defined", traceback: 'Traceback ...' },
      { type: 'number_of_executions', text: undefined },
      { type: 'end_of_execution' },
    ];
    const r = cellResult(events, false);
    expect(r.isError).to.equal(false);
    expect(textOf(r)).to.deep.equal({
      stdout: 'a\nb\n',
      stderr: 'warn\n',
      results: [
        { text: '<Figure size 640x480 with 1 Axes>', chart: 'line', image: 1 },
        { text: '42', main: true },
      ],
      error: { name: 'NameError', value: "name 'y' is not defined", traceback: 'Traceback ...' },
    });
    expect(r.content.slice(1)).to.deep.equal([{ type: 'image', data: png(1), mimeType: 'image/png' }]);
  });

  it('bounds what it carries: pictures past the limit counted, long output cut and said, a cut answer said', () => {
    const many: CellEvent[] = Array.from({ length: RUN_CODE_LIMITS.images + 2 }, (_, i) => ({
      type: 'result',
      text: `fig ${i}`,
      png: png(i),
    }));
    const long = 'x'.repeat(MCP_LIMITS.execOutputBytes + 10);
    const r = cellResult([{ type: 'stdout', text: long }, ...many], true);
    const out = textOf(r);
    expect(r.content).to.have.length(1 + RUN_CODE_LIMITS.images);
    expect(out.images_left_out).to.equal(2);
    expect(out.results.at(-1)).to.deep.equal({ text: `fig ${RUN_CODE_LIMITS.images + 1}` });
    expect(
      out.stdout.startsWith(`${'x'.repeat(MCP_LIMITS.execOutputBytes)}\n[stdout truncated: 10 more bytes`),
    ).to.equal(true);
    expect(out.cut).to.match(/passed 32 MiB: the rest was not read and the cell was stopped/);
  });
});

describe('MCP run_code: the interpreter started in a VM once', () => {
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
    );
    expect(calls).to.deep.equal(['process', 'start', 'open']);
    const raced: string[] = [];
    await ensureServer(
      clientWith(async () => {
        throw new SvcError(409, 'a running process already has tag e2b-code-interpreter', 'already_exists');
      }, raced),
      'vm',
    );
    expect(raced).to.deep.equal(['process', 'start', 'open']);
  });

  it('fails with the daemon’s word on any other refusal', async () => {
    const err = await ensureServer(
      clientWith(async () => {
        throw new SvcError(400, 'bad cwd', 'invalid_argument');
      }, []),
      'vm',
    ).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(SvcError).and.to.have.property('message', 'bad cwd');
  });
});
