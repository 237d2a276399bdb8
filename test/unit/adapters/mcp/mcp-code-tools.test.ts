import { expect } from 'chai';
import { cellResult, RUN_CODE_LIMITS } from '../../../../src/adapters/mcp/mcp-code-tools.js';
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
