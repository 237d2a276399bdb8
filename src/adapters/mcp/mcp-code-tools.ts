import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { SvcClient } from '../client/svc-client.js';
import { ensureServer, runCell, type CellEvent } from '../code-interpreter/guest-server.js';
import { bounded, DEFAULT_TIMEOUT_S, MCP_LIMITS, timeoutSeconds, tool, vmName } from './mcp-kit.js';

/** What one run_code answer carries at most: its text as exec's output, and this many pictures. */
export const RUN_CODE_LIMITS = { images: 8, readBytes: 32 * 1024 * 1024 } as const;

/**
 * `run_code`: a cell of Python (or JavaScript, or bash) in a VM's code interpreter, the server E2B's code
 * interpreter template runs (started in the VM at the first call, kept running, its kernel keeping
 * its variables from one call to the next), its figures as MCP images.
 */
export function registerCodeTools(server: McpServer, client: SvcClient): void {
  server.registerTool(
    'run_code',
    {
      title: 'Run code in a VM, keeping state',
      description:
        'Runs a cell of Python in a running VM\'s code interpreter, as a Jupyter notebook would: variables, imports and the working folder stay from one call to the next (per VM). Returns what it printed, the value of its last line, the error with its traceback, and each matplotlib figure shown (plt.show(), or left open) as a PNG image. IPython\'s `!command`, `%cd`, `%pip` and `%%bash` work. language "js" runs JavaScript in a node kernel of its own (state kept, top-level await, require), "ts" TypeScript in another (its types stripped, not checked); "bash" runs the cell with bash (no state kept). The VM\'s image needs python3 (debian has it, with numpy, pandas and matplotlib; add packages with `!apt-get install -y python3-scipy` or `%pip install`). The first call in a VM starts the interpreter (a few seconds).',
      inputSchema: {
        name: vmName,
        code: z
          .string()
          .min(1)
          .max(1024 * 1024),
        language: z.enum(['python', 'js', 'ts', 'bash']).optional().describe('default python'),
        env: z
          .record(z.string(), z.string())
          .optional()
          .describe("environment variables for this cell only (os.environ while it runs, and its commands')"),
        timeout_s: timeoutSeconds(
          `interrupt the cell after this many seconds (default ${DEFAULT_TIMEOUT_S}); the kernel and its state stay`,
        ),
      },
      annotations: { readOnlyHint: false, destructiveHint: true, openWorldHint: true },
    },
    ({ name, code, language, env, timeout_s }) =>
      tool(async () => {
        await ensureServer(client, name, 'run_code');
        const run = await runCell(
          client,
          name,
          { code, language, env_vars: env },
          { maxBytes: RUN_CODE_LIMITS.readBytes, timeoutS: timeout_s ?? DEFAULT_TIMEOUT_S },
        );
        return cellResult(run.events, run.cut);
      }),
  );
}

/**
 * A cell's events as a tool result: one JSON text (stdout, stderr, the results' text and what
 * else each has, the error) and an image per PNG result, in the order they came.
 */
export function cellResult(events: CellEvent[], cut: boolean): CallToolResult {
  const out = { stdout: '', stderr: '', results: [] as Record<string, unknown>[] } as {
    stdout: string;
    stderr: string;
    results: Record<string, unknown>[];
    error?: { name: string; value: string; traceback: string };
    images_left_out?: number;
    cut?: string;
  };
  const images: CallToolResult['content'] = [];
  let left = 0;
  for (const e of events) {
    if (e.type === 'stdout' || e.type === 'stderr') out[e.type] += e.text ?? '';
    else if (e.type === 'error') out.error = { name: e.name ?? '', value: e.value ?? '', traceback: e.traceback ?? '' };
    else if (e.type === 'result') {
      const r: Record<string, unknown> = {};
      if (e.text !== undefined) r.text = bounded(e.text, MCP_LIMITS.execOutputBytes, 'text');
      if (e.is_main_result) r.main = true;
      if (e.chart?.type) r.chart = e.chart.type;
      if (e.png) {
        if (images.length < RUN_CODE_LIMITS.images) {
          images.push({ type: 'image', data: e.png, mimeType: 'image/png' });
          r.image = images.length;
        } else left++;
      }
      out.results.push(r);
    }
  }
  out.stdout = bounded(out.stdout, MCP_LIMITS.execOutputBytes, 'stdout');
  out.stderr = bounded(out.stderr, MCP_LIMITS.execOutputBytes, 'stderr');
  if (out.error) out.error.traceback = bounded(out.error.traceback, MCP_LIMITS.execOutputBytes, 'traceback');
  if (left) out.images_left_out = left;
  if (cut)
    out.cut = `the cell's output passed ${RUN_CODE_LIMITS.readBytes >> 20} MiB: the rest was not read and the cell was stopped`;
  return { content: [{ type: 'text', text: JSON.stringify(out, null, 2) }, ...images], isError: false };
}
