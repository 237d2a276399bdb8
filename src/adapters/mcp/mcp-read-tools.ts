import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { SvcClient } from '../client/svc-client.js';
import {
  guestPath,
  isSecretPath,
  json,
  MCP_LIMITS,
  readAll,
  READS,
  text,
  tool,
  vmName,
  type McpPolicy,
} from './mcp-kit.js';
import { z } from 'zod';
import { MAX_TAIL_LINES } from '../../domain/processes.js';
import { formatFrom, movedBack } from '../../domain/timeline.js';

/** The tools that only look: VMs, files, images, stats, egress, processes and their output. */
export function registerReadTools(server: McpServer, client: SvcClient, policy: McpPolicy): void {
  server.registerTool(
    'list_vms',
    { title: 'List VMs', description: 'Every VM with its status, image, resources and ports.', annotations: READS },
    () => tool(async () => json(await client.list())),
  );
  server.registerTool(
    'get_vm',
    {
      title: 'Get a VM',
      description: 'One VM: status, image, cpus, memory, disk, forwards, tags, timestamps.',
      inputSchema: { name: vmName },
      annotations: READS,
    },
    ({ name }) => tool(async () => json(await client.get(name))),
  );
  server.registerTool(
    'list_snapshots',
    {
      title: "List a VM's snapshots",
      description:
        'Its named snapshots, oldest first: name, when, whether it holds memory (a running guest), its shape.',
      inputSchema: { name: vmName },
      annotations: READS,
    },
    ({ name }) => tool(async () => json(await client.snapshots(name))),
  );
  server.registerTool(
    'read_file',
    {
      title: 'Read a file in a VM',
      description: `Reads a file from a running VM. Text comes back as text; anything that is not UTF-8 as base64. At most ${MCP_LIMITS.readFileBytes} bytes (the result says when it was cut).`,
      inputSchema: { name: vmName, path: guestPath },
      annotations: READS,
    },
    ({ name, path }) =>
      tool(async () => {
        if (policy.readOnly && isSecretPath(path))
          throw new Error(
            `${path} is where svc puts injected secrets; a read-only MCP server does not read them (their values never pass through the conversation)`,
          );
        const { body } = await client.download(name, path);
        const { data, more } = await readAll(body, MCP_LIMITS.readFileBytes);
        body.destroy();
        const asText = data.toString('utf8');
        const isText = Buffer.from(asText).equals(data) && !asText.includes('\0');
        const note = more ? `\n[truncated at ${MCP_LIMITS.readFileBytes} bytes]` : '';
        return isText ? text(asText + note) : text(`base64:${data.toString('base64')}${note}`);
      }),
  );
  server.registerTool(
    'list_dir',
    {
      title: 'List a directory in a VM',
      description: 'Entries of a guest directory: name, type, size, mode, mtime (links not followed).',
      inputSchema: { name: vmName, path: guestPath },
      annotations: READS,
    },
    ({ name, path }) => tool(async () => json(await client.readdir(name, path))),
  );
  server.registerTool(
    'stat',
    {
      title: 'Stat a path in a VM',
      description: 'Type, size, mode, owner and times of one guest path.',
      inputSchema: { name: vmName, path: guestPath },
      annotations: READS,
    },
    ({ name, path }) => tool(async () => json(await client.stat(name, path))),
  );
  server.registerTool(
    'list_images',
    {
      title: 'List images',
      description: 'The guest images VMs can be created from, and which VMs use each.',
      annotations: READS,
    },
    () =>
      tool(async () =>
        json((await client.listImages()).filter((i) => !policy.images.length || policy.images.includes(i.id))),
      ),
  );
  server.registerTool(
    'stats',
    {
      title: 'VM stats',
      description: 'Live CPU, memory, disk and network figures from inside a running VM.',
      inputSchema: { name: vmName },
      annotations: READS,
    },
    ({ name }) => tool(async () => json(await client.stats(name))),
  );
  server.registerTool(
    'egress',
    {
      title: 'What a VM may reach, and what it did',
      description:
        "A VM's egress policy (default allow or deny; rules: domains such as *.github.com, IPs or CIDRs with an optional :port, host:PORT for a port on the host reached as host.svc.internal) and its latest decisions: names it asked for, connections let out or refused and by which rule, bytes each way.",
      inputSchema: {
        name: vmName,
        limit: z.number().int().min(1).max(1000).optional().describe('how many log entries, newest last (default 50)'),
      },
      annotations: READS,
    },
    ({ name, limit }) =>
      tool(async () =>
        json({
          policy: await client.egress(name),
          secrets: await client.egressSecrets(name),
          log: await client.egressLog(name, { limit: limit ?? 50 }),
        }),
      ),
  );

  server.registerTool(
    'list_processes',
    {
      title: "List a VM's durable processes",
      description:
        'The processes started with start_process in a VM: id, tag, pid, command, running or how they ended (exit_code, signal), and how many bytes each output stream holds.',
      inputSchema: { name: vmName },
      annotations: READS,
    },
    ({ name }) => tool(async () => json(await client.processes(name))),
  );
  server.registerTool(
    'process_output',
    {
      title: "Read a process's output",
      description: `A durable process's output from a byte offset (what it printed while nobody read is kept, ${'16 MiB'} per stream). Give \`from\` as the \`next_from\` of the last read (and \`timeline\` as its \`timeline\`: a VM reverted to a snapshot in between is then said, and the read starts where the reverted guest's bytes begin) to get only what is new, or \`tail_lines\` for what it printed lately; \`wait_ms\` waits that long for news when there is none yet. At most ${MCP_LIMITS.execOutputBytes} bytes a call (next_from says where to go on).`,
      inputSchema: {
        name: vmName,
        id: z.string().max(64).describe('process id (p3) or tag'),
        from: z
          .string()
          .max(100)
          .optional()
          .describe('byte offset N, or stdout:N,stderr:M (next_from of the last read); default 0'),
        timeline: z.string().max(32).optional().describe('the timeline of the last read, with its next_from'),
        tail_lines: z
          .number()
          .int()
          .min(0)
          .max(MAX_TAIL_LINES)
          .optional()
          .describe("instead of from: each stream's last N lines (what it printed lately); next_from then goes on"),
        wait_ms: z
          .number()
          .int()
          .min(0)
          .max(30_000)
          .optional()
          .describe('wait up to this long for output when none is there (default 0)'),
      },
      annotations: READS,
    },
    ({ name, id, from, timeline, tail_lines, wait_ms }) =>
      tool(async () => {
        if (from !== undefined && tail_lines !== undefined) throw new Error('give from or tail_lines, not both');
        const pos: Record<string, number> = {};
        let all: number | undefined;
        if (from && /^\d+$/.test(from)) all = Number(from);
        else if (from) for (const part of from.split(',')) pos[part.split(':')[0]] = Number(part.split(':')[1]);
        const out: Record<string, string> = {};
        const notes: string[] = [];
        let ended: unknown = null;
        let size = 0;
        let on = timeline;
        let reverted: string | undefined;
        const ac = new AbortController();
        const timer = wait_ms ? setTimeout(() => ac.abort(), wait_ms) : undefined;
        try {
          const frames = client.processOutput(name, id, {
            from: all ?? (Object.keys(pos).length ? pos : undefined),
            timeline,
            onTimeline: (t) => (on = t),
            tail: tail_lines,
            follow: !!wait_ms,
            signal: ac.signal,
          });
          for await (const f of frames) {
            if ('start' in f) Object.assign(pos, f.start);
            else if ('stream' in f) {
              const bytes = f.encoding === 'base64' ? Buffer.from(f.data, 'base64') : Buffer.from(f.data);
              out[f.stream] = (out[f.stream] ?? '') + (f.encoding === 'base64' ? `[base64:${f.data}]` : f.data);
              pos[f.stream] = f.offset + bytes.length;
              size += bytes.length;
              if (size >= MCP_LIMITS.execOutputBytes) break;
              if (wait_ms) ac.abort(); // news came: answer with it
            } else if ('truncated' in f) {
              notes.push(`${f.truncated.stream} before byte ${f.truncated.before} is no longer kept`);
              pos[f.truncated.stream] = f.truncated.before;
            } else if ('reverted' in f) {
              reverted = `the vm was reverted to a snapshot: its output from ${formatFrom(f.reverted.from)} on is the reverted guest's (what you read there before is not its history)`;
              all = movedBack(pos, all, f.reverted.from);
            } else {
              ended = f;
              break;
            }
          }
        } finally {
          clearTimeout(timer);
          ac.abort();
        }
        const next =
          Object.entries(pos)
            .map(([s, n]) => `${s}:${n}`)
            .join(',') || String(all ?? 0);
        return json({
          output: out,
          next_from: next,
          ...(on ? { timeline: on } : {}),
          ended,
          ...(reverted ? { reverted } : {}),
          ...(notes.length ? { truncated: notes } : {}),
        });
      }),
  );
}
