import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { posix } from 'node:path';
import { z } from 'zod';
import { WAIT_MODES } from '../../domain/create-request.js';
import { specOf } from '../../domain/egress-secrets.js';
import { VERSION } from '../../version.js';
import type { SvcClient } from '../client/svc-client.js';

/** Under the folder svc injects secrets into by default (`/run/svc/secrets`), however the path is spelled. */
export function isSecretPath(path: string): boolean {
  const p = posix
    .normalize(`/${path}`)
    .replace(/\/+$/, '')
    .replace(/^\/var\/run(?=\/|$)/, '/run'); // /var/run is a link to /run
  return p === '/run/svc/secrets' || p.startsWith('/run/svc/secrets/');
}

/** What an operator allows agents to do through MCP (config `mcp_*`, or `svc mcp` flags). */
export interface McpPolicy {
  /** Only the tools that read: list, get, read a file, list a directory, stat, images, stats. */
  readOnly: boolean;
  /** Images a create may use; empty: any. */
  images: readonly string[];
  /** VMs created through MCP that may exist at once (tag `svc.created-by: mcp`); 0: no cap. */
  maxVms: number;
  /**
   * May MCP clients change a VM's egress policy (`set_egress`)? Off by default: the agent on the
   * other end is often the code the policy contains. Reading the policy and its log is always allowed.
   */
  egress?: boolean;
}

/** How much output a tool result carries: more is cut and the result says so. */
export const MCP_LIMITS = { execOutputBytes: 64 * 1024, readFileBytes: 1024 * 1024, consoleBytes: 64 * 1024 } as const;
const MCP_TAG = 'svc.created-by';

type Extra = {
  _meta?: { progressToken?: string | number };
  sendNotification: (n: {
    method: 'notifications/progress';
    params: { progressToken: string | number; progress: number; total?: number; message?: string };
  }) => Promise<void>;
};

const text = (s: string): CallToolResult => ({ content: [{ type: 'text', text: s }] });
const json = (v: unknown): CallToolResult => text(JSON.stringify(v, null, 2));

/** Output cut at `max` bytes, with what was cut said. */
function bounded(s: string, max: number, what: string): string {
  const b = Buffer.from(s);
  if (b.length <= max) return s;
  return `${b.subarray(0, max).toString('utf8')}\n[${what} truncated: ${b.length - max} more bytes; narrow the command or redirect to a file and read it]`;
}

/** Runs a tool body; whatever it throws comes back as an MCP tool error with the daemon's message. */
async function tool(body: () => Promise<CallToolResult>): Promise<CallToolResult> {
  try {
    return await body();
  } catch (err) {
    const e = err as { message?: string; code?: string; status?: number };
    return {
      isError: true,
      content: [
        {
          type: 'text',
          text: `${e.message ?? String(err)}${e.code ? ` (${e.code}${e.status ? `, HTTP ${e.status}` : ''})` : ''}`,
        },
      ],
    };
  }
}

async function readAll(body: AsyncIterable<unknown>, max: number): Promise<{ data: Buffer; more: boolean }> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const c of body) {
    const b = c as Buffer;
    if (size + b.length > max) {
      parts.push(b.subarray(0, max - size));
      return { data: Buffer.concat(parts), more: true };
    }
    parts.push(b);
    size += b.length;
  }
  return { data: Buffer.concat(parts), more: false };
}

const vmName = z
  .string()
  .regex(/^[a-z][a-z0-9-]{0,62}$/)
  .describe('the VM name');
const guestPath = z.string().startsWith('/').describe('an absolute path in the guest');

/**
 * The svc MCP server: tools, resources and safety switches over a SvcClient, so the same server
 * runs over stdio (`svc mcp`, talking to the daemon like the CLI) and inside the daemon at /mcp.
 */
export function buildMcpServer(client: SvcClient, policy: McpPolicy): McpServer {
  const server = new McpServer(
    { name: 'svc', version: VERSION },
    {
      instructions:
        'svc runs Linux VMs (QEMU) on this host. Create a VM with create_vm (image "debian" has apt, python3 and systemd), run commands with exec, move files with read_file and write_file, and delete the VM when done.' +
        (policy.readOnly ? ' This server is read-only: it can look, not change.' : ''),
    },
  );
  const readOnly = { readOnlyHint: true, openWorldHint: false } as const;
  let creating = 0;

  server.registerTool(
    'list_vms',
    { title: 'List VMs', description: 'Every VM with its status, image, resources and ports.', annotations: readOnly },
    () => tool(async () => json(await client.list())),
  );
  server.registerTool(
    'get_vm',
    {
      title: 'Get a VM',
      description: 'One VM: status, image, cpus, memory, disk, forwards, tags, timestamps.',
      inputSchema: { name: vmName },
      annotations: readOnly,
    },
    ({ name }) => tool(async () => json(await client.get(name))),
  );
  server.registerTool(
    'read_file',
    {
      title: 'Read a file in a VM',
      description: `Reads a file from a running VM. Text comes back as text; anything that is not UTF-8 as base64. At most ${MCP_LIMITS.readFileBytes} bytes (the result says when it was cut).`,
      inputSchema: { name: vmName, path: guestPath },
      annotations: readOnly,
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
      annotations: readOnly,
    },
    ({ name, path }) => tool(async () => json(await client.readdir(name, path))),
  );
  server.registerTool(
    'stat',
    {
      title: 'Stat a path in a VM',
      description: 'Type, size, mode, owner and times of one guest path.',
      inputSchema: { name: vmName, path: guestPath },
      annotations: readOnly,
    },
    ({ name, path }) => tool(async () => json(await client.stat(name, path))),
  );
  server.registerTool(
    'list_images',
    {
      title: 'List images',
      description: 'The guest images VMs can be created from, and which VMs use each.',
      annotations: readOnly,
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
      annotations: readOnly,
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
      annotations: readOnly,
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
      annotations: readOnly,
    },
    ({ name }) => tool(async () => json(await client.processes(name))),
  );
  server.registerTool(
    'process_output',
    {
      title: "Read a process's output",
      description: `A durable process's output from a byte offset (what it printed while nobody read is kept, ${'16 MiB'} per stream). Give \`from\` as the \`next_from\` of the last read to get only what is new; \`wait_ms\` waits that long for news when there is none yet. At most ${MCP_LIMITS.execOutputBytes} bytes a call (next_from says where to go on).`,
      inputSchema: {
        name: vmName,
        id: z.string().max(64).describe('process id (p3) or tag'),
        from: z
          .string()
          .max(100)
          .optional()
          .describe('byte offset N, or stdout:N,stderr:M (next_from of the last read); default 0'),
        wait_ms: z
          .number()
          .int()
          .min(0)
          .max(30_000)
          .optional()
          .describe('wait up to this long for output when none is there (default 0)'),
      },
      annotations: readOnly,
    },
    ({ name, id, from, wait_ms }) =>
      tool(async () => {
        const pos: Record<string, number> = {};
        let all: number | undefined;
        if (from && /^\d+$/.test(from)) all = Number(from);
        else if (from) for (const part of from.split(',')) pos[part.split(':')[0]] = Number(part.split(':')[1]);
        const out: Record<string, string> = {};
        const notes: string[] = [];
        let ended: unknown = null;
        let size = 0;
        const ac = new AbortController();
        const timer = wait_ms ? setTimeout(() => ac.abort(), wait_ms) : undefined;
        try {
          const frames = client.processOutput(name, id, {
            from: all ?? (Object.keys(pos).length ? pos : undefined),
            follow: !!wait_ms,
            signal: ac.signal,
          });
          for await (const f of frames) {
            if ('stream' in f) {
              const bytes = f.encoding === 'base64' ? Buffer.from(f.data, 'base64') : Buffer.from(f.data);
              out[f.stream] = (out[f.stream] ?? '') + (f.encoding === 'base64' ? `[base64:${f.data}]` : f.data);
              pos[f.stream] = f.offset + bytes.length;
              size += bytes.length;
              if (size >= MCP_LIMITS.execOutputBytes) break;
              if (wait_ms) ac.abort(); // news came: answer with it
            } else if ('truncated' in f) {
              notes.push(`${f.truncated.stream} before byte ${f.truncated.before} is no longer kept`);
              pos[f.truncated.stream] = f.truncated.before;
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
        return json({ output: out, next_from: next, ended, ...(notes.length ? { truncated: notes } : {}) });
      }),
  );

  registerResources(server, client);
  if (policy.readOnly) return server;

  const change = { readOnlyHint: false, destructiveHint: false, openWorldHint: false } as const;
  const destroy = { readOnlyHint: false, destructiveHint: true, openWorldHint: false } as const;
  const checkImage = (image: string | undefined) => {
    if (!policy.images.length) return;
    const id = image ?? 'default';
    if (!policy.images.includes(id))
      throw new Error(`image ${id} is not allowed through MCP here (allowed: ${policy.images.join(', ')})`);
  };
  /** A clone is of its template's image (its disk holds that image and whatever the template wrote). */
  const checkTemplate = async (template: string) => {
    if (!policy.images.length) return;
    const vm = await client.get(template);
    if (!policy.images.includes(vm.image))
      throw new Error(
        `${template} is a VM of image ${vm.image}, which is not allowed through MCP here (allowed: ${policy.images.join(', ')})`,
      );
  };
  const checkPool = async () => {
    if (!policy.images.length) return;
    const pool = await client.pool();
    if (pool.template) await checkTemplate(pool.template);
  };
  const checkCap = async (more = 1) => {
    if (!policy.maxVms) return;
    const mine = (await client.list()).filter((v) => v.tags?.[MCP_TAG] === 'mcp').length;
    if (mine + creating + more > policy.maxVms)
      throw new Error(`at most ${policy.maxVms} VMs may be created through MCP here; ${mine} exist; delete one first`);
  };

  server.registerTool(
    'create_vm',
    {
      title: 'Create a VM',
      description:
        'Creates and boots a VM and waits until it is ready; progress is reported as MCP progress notifications. Give an image (default: debian), or from (a stopped or suspended persistent VM to clone), or from_pool.',
      inputSchema: {
        name: vmName.optional().describe('a name; one is generated when omitted'),
        image: z.string().optional().describe('image id, for example debian or minimal'),
        persistent: z
          .boolean()
          .optional()
          .describe('keep the VM across shutdowns (default false: removed on shutdown)'),
        cpus: z.number().int().min(1).max(64).optional(),
        memory_mb: z.number().int().min(64).optional(),
        disk_gb: z.number().int().min(1).optional(),
        from: vmName.optional().describe('clone this stopped or suspended persistent VM'),
        from_pool: z.boolean().optional().describe('take a ready VM from the warm pool'),
        wait: z
          .enum(WAIT_MODES)
          .optional()
          .describe('what ready means: auto (default), agent, ssh, userdata, bootstrap'),
        userdata: z.string().optional().describe('a shell script or #cloud-config run at first boot'),
        ttl: z
          .union([z.number().int().min(1), z.string()])
          .optional()
          .describe('its lifetime: whole seconds or a duration such as 30m; then it is deleted (or suspended)'),
        on_expire: z.enum(['delete', 'suspend']).optional().describe('what the end of ttl does (default delete)'),
      },
      annotations: change,
    },
    (args, extra) =>
      tool(async () => {
        const { wait, ...req } = args;
        if (req.from) await checkTemplate(req.from);
        else if (req.from_pool) await checkPool();
        else checkImage(req.image);
        await checkCap();
        creating++;
        try {
          const token = (extra as unknown as Extra)._meta?.progressToken;
          let step = 0;
          let last: { phase: string; error?: string; instance?: unknown } | undefined;
          for await (const ev of client.createStream({ ...req, tags: { [MCP_TAG]: 'mcp' } }, { wait })) {
            last = ev;
            if (token !== undefined) {
              await (extra as unknown as Extra)
                .sendNotification({
                  method: 'notifications/progress',
                  params: { progressToken: token, progress: ++step, message: `${ev.phase}: ${ev.message}` },
                })
                .catch(() => undefined);
            }
          }
          if (!last) throw new Error('the daemon ended the create without a word');
          if (last.phase === 'error') throw new Error(last.error ?? 'create failed');
          return json(last.instance);
        } finally {
          creating--;
        }
      }),
  );
  server.registerTool(
    'delete_vm',
    {
      title: 'Delete a VM',
      description: 'Stops the VM and removes it with its disk. Cannot be undone.',
      inputSchema: { name: vmName },
      annotations: destroy,
    },
    ({ name }) => tool(async () => json(await client.delete(name))),
  );
  const verbs = [
    [
      'start_vm',
      'Start a VM',
      'Boots a stopped persistent VM and waits until it is ready.',
      (n: string) => client.start(n),
    ],
    ['stop_vm', 'Shut down a VM', 'Shuts the VM down (an ephemeral VM is removed).', (n: string) => client.shutdown(n)],
    ['pause_vm', 'Pause a VM', "Freezes the VM's CPUs; resume_vm continues.", (n: string) => client.pause(n)],
    ['resume_vm', 'Resume a VM', 'Continues a paused VM.', (n: string) => client.resume(n)],
    [
      'suspend_vm',
      'Suspend a VM',
      "Saves a persistent VM's memory to disk and stops it; restore_vm brings it back as it was.",
      (n: string) => client.suspend(n),
    ],
    ['restore_vm', 'Restore a VM', 'Brings a suspended VM back where it was.', (n: string) => client.restore(n)],
  ] as const;
  for (const [id, title, description, run] of verbs) {
    server.registerTool(id, { title, description, inputSchema: { name: vmName }, annotations: change }, ({ name }) =>
      tool(async () => json(await run(name))),
    );
  }
  server.registerTool(
    'clone_vm',
    {
      title: 'Clone a VM',
      description: 'A new VM from a stopped or suspended persistent VM (from its snapshot when it has one: seconds).',
      inputSchema: {
        template: vmName.describe('the VM to clone'),
        name: vmName.optional(),
        persistent: z.boolean().optional(),
      },
      annotations: change,
    },
    ({ template, name, persistent }) =>
      tool(async () => {
        await checkTemplate(template);
        await checkCap();
        return json(await client.clone(template, { name, persistent, tags: { [MCP_TAG]: 'mcp' } }));
      }),
  );
  server.registerTool(
    'fork_vm',
    {
      title: 'Fork a running VM',
      description:
        'Copies of a running (or paused) VM as it is now, processes and files included, each its own machine (name, machine id, random generator, disk); the VM is held well under a second and runs on. Try several approaches from one state.',
      inputSchema: {
        name: vmName.describe('the VM to fork'),
        count: z.number().int().min(1).max(10).optional().describe('how many forks (default 1)'),
      },
      annotations: change,
    },
    ({ name, count }) =>
      tool(async () => {
        await checkTemplate(name);
        await checkCap(count ?? 1);
        return json(await client.fork(name, { count: count ?? 1, tags: { [MCP_TAG]: 'mcp' } }));
      }),
  );
  server.registerTool(
    'exec',
    {
      title: 'Run a command in a VM',
      description: `Runs a program in a running VM and returns stdout, stderr and the exit code. cmd is the program (use cmd "bash" with args ["-c", "..."] for a shell line). Each output is cut at ${MCP_LIMITS.execOutputBytes} bytes, and the result says so.`,
      inputSchema: {
        name: vmName,
        cmd: z.string().min(1),
        args: z.array(z.string()).optional(),
        cwd: guestPath.optional(),
        env: z.record(z.string(), z.string()).optional().describe('extra environment variables'),
        stdin: z.string().optional(),
        timeout_s: z
          .number()
          .int()
          .min(1)
          .max(3600)
          .optional()
          .describe('kill the command after this many seconds (default 300)'),
      },
      annotations: { readOnlyHint: false, destructiveHint: true, openWorldHint: true },
    },
    ({ name, cmd, args, cwd, env, stdin, timeout_s }) =>
      tool(async () => {
        const argv =
          env && Object.keys(env).length
            ? ['env', ...Object.entries(env).map(([k, v]) => `${k}=${v}`), cmd, ...(args ?? [])]
            : [cmd, ...(args ?? [])];
        const r = await client.exec(
          name,
          { cmd: argv[0], args: argv.slice(1), cwd, timeoutMs: (timeout_s ?? 300) * 1000 },
          stdin === undefined ? undefined : Buffer.from(stdin),
        );
        const out = {
          exit_code: r.exit_code,
          stdout: bounded(r.stdout, MCP_LIMITS.execOutputBytes, 'stdout'),
          stderr: bounded(r.stderr, MCP_LIMITS.execOutputBytes, 'stderr'),
          ...(r.error ? { error: r.error } : {}),
          ...(r.truncated ? { truncated: true } : {}),
        };
        return { ...json(out), isError: false };
      }),
  );
  server.registerTool(
    'write_file',
    {
      title: 'Write a file in a VM',
      description:
        'Writes a file in a running VM (parents are made), atomically. Give content (text) or content_base64.',
      inputSchema: {
        name: vmName,
        path: guestPath,
        content: z.string().optional(),
        content_base64: z.string().optional(),
        mode: z
          .string()
          .regex(/^0?[0-7]{3,4}$/)
          .optional()
          .describe('octal permissions, default 0644'),
      },
      annotations: change,
    },
    ({ name, path, content, content_base64, mode }) =>
      tool(async () => {
        if ((content === undefined) === (content_base64 === undefined))
          throw new Error('give content or content_base64, one of them');
        const data = content !== undefined ? Buffer.from(content) : Buffer.from(content_base64!, 'base64');
        await client.upload(name, { path, permissions: mode }, data, data.length);
        return text(`wrote ${data.length} bytes to ${path}`);
      }),
  );
  server.registerTool(
    'mkdir',
    {
      title: 'Make a directory in a VM',
      description: 'Makes a directory (and its parents with recursive).',
      inputSchema: { name: vmName, path: guestPath, recursive: z.boolean().optional() },
      annotations: change,
    },
    ({ name, path, recursive }) =>
      tool(async () => {
        await client.mkdir(name, path, { recursive });
        return text(`made ${path}`);
      }),
  );
  server.registerTool(
    'remove',
    {
      title: 'Remove a path in a VM',
      description: 'Removes a file, link or directory (recursive for a non-empty one).',
      inputSchema: { name: vmName, path: guestPath, recursive: z.boolean().optional() },
      annotations: destroy,
    },
    ({ name, path, recursive }) =>
      tool(async () => {
        await client.remove(name, path, { recursive });
        return text(`removed ${path}`);
      }),
  );
  server.registerTool(
    'add_forward',
    {
      title: 'Forward a host port to a VM',
      description:
        'Opens 127.0.0.1:host_port on the host to guest_port in the VM; host_port 0 or none picks a free one.',
      inputSchema: {
        name: vmName,
        guest_port: z.number().int().min(1).max(65535),
        host_port: z.number().int().min(0).max(65535).optional(),
      },
      annotations: change,
    },
    ({ name, guest_port, host_port }) =>
      tool(async () => json(await client.addForward(name, { guest_port, host_port }))),
  );
  server.registerTool(
    'remove_forward',
    {
      title: 'Remove a port forward',
      description: 'Closes a live forward by its host port.',
      inputSchema: { name: vmName, host_port: z.number().int().min(1).max(65535) },
      annotations: change,
    },
    ({ name, host_port }) => tool(async () => json(await client.removeForward(name, host_port))),
  );
  server.registerTool(
    'inject_secret',
    {
      title: 'Put a host secret in a VM',
      description:
        'Writes a secret stored on the host (by its name) into the VM as a file (default /run/svc/secrets/<secret>, mode 0600). The value never passes through this conversation.',
      inputSchema: {
        name: vmName,
        secret: z.string().regex(/^[A-Za-z_][A-Za-z0-9_.-]{0,63}$/),
        path: guestPath.optional(),
        mode: z
          .string()
          .regex(/^0?[0-7]{3,4}$/)
          .optional(),
      },
      annotations: change,
    },
    ({ name, secret, path, mode }) => tool(async () => json(await client.injectSecret(name, secret, { path, mode }))),
  );
  server.registerTool(
    'start_process',
    {
      title: 'Start a process that outlives the call',
      description:
        'Starts a command in a VM that keeps running after this call (a server, a watcher, a long job). Read what it prints with process_output, at any time, from any offset; stop it with signal_process. For a command whose result you want now, use exec.',
      inputSchema: {
        name: vmName,
        cmd: z.string().min(1).max(4096),
        args: z.array(z.string()).max(1000).optional(),
        cwd: z.string().max(4096).optional(),
        env: z.record(z.string(), z.string()).optional(),
        tag: z.string().max(64).optional().describe('a name to find it by (one running process per tag)'),
      },
      annotations: change,
    },
    ({ name, cmd, args, cwd, env, tag }) =>
      tool(async () => json(await client.startProcess(name, { cmd, args: args ?? [], cwd, env, tag }))),
  );
  server.registerTool(
    'signal_process',
    {
      title: 'Signal a process',
      description: 'Sends a signal to a durable process (SIGTERM by default; SIGKILL, SIGINT, SIGHUP...).',
      inputSchema: {
        name: vmName,
        id: z.string().max(64).describe('process id (p3) or tag'),
        signal: z.string().max(16).optional(),
      },
      annotations: destroy,
    },
    ({ name, id, signal }) =>
      tool(async () => {
        await client.signalProcess(name, id, signal ?? 'SIGTERM');
        return json(await client.process(name, id));
      }),
  );
  if (policy.egress) {
    server.registerTool(
      'set_egress',
      {
        title: 'Set what a VM may reach',
        description:
          "Replaces a VM's egress policy, in force at once (open connections it forbids are closed). default: allow or deny; allow and deny: rules (deny wins): a domain (pypi.org, *.github.com), an IP or CIDR with an optional :port, or host:PORT.",
        inputSchema: {
          name: vmName,
          default: z.enum(['allow', 'deny']),
          allow: z.array(z.string()).max(1000).optional(),
          deny: z.array(z.string()).max(1000).optional(),
        },
        annotations: { readOnlyHint: false, destructiveHint: false, openWorldHint: true },
      },
      ({ name, default: def, allow, deny }) =>
        tool(async () => {
          // The VM's SOCKS proxy, if any, stays: it is the operator's, not a rule an MCP client sets.
          const { proxy } = await client.egress(name);
          const policy = { default: def, allow: allow ?? [], deny: deny ?? [], ...(proxy ? { proxy } : {}) };
          return json(await client.setEgress(name, policy));
        }),
    );
    server.registerTool(
      'bind_egress_secret',
      {
        title: 'Let a VM use a host secret, on the way out only',
        description:
          "Binds a host secret, by its name, to a VM for the hosts given: the VM's programs see a placeholder in the variable `env`, and requests to those hosts carry the real value, put in by the host as they leave (docs/egress-secrets.md). The value never enters the VM and is never shown. Replaces the VM's binding of that secret; hosts: [] removes it.",
        inputSchema: {
          name: vmName,
          secret: z.string().describe('the name of a host secret (svc secret ls)'),
          hosts: z
            .array(z.string())
            .max(64)
            .describe('api.example.com, *.example.com or host.svc.internal; [] unbinds'),
          header: z.string().optional().describe('only this request header carries the value'),
          format: z.string().optional().describe('what that header becomes, such as "Bearer {value}"'),
          env: z.string().optional().describe('the guest variable that holds the placeholder'),
        },
        annotations: { readOnlyHint: false, destructiveHint: false, openWorldHint: true },
      },
      ({ name, secret, hosts, header, format, env }) =>
        tool(async () => {
          const others = (await client.egressSecrets(name)).filter((b) => b.secret !== secret).map(specOf);
          const mine = hosts.length
            ? [{ secret, hosts, ...(header ? { header } : {}), ...(format ? { format } : {}), ...(env ? { env } : {}) }]
            : [];
          return json(await client.setEgressSecrets(name, [...others, ...mine]));
        }),
    );
  }
  return server;
}

/** Resources: the VM list, one VM, the activity log, a VM's console log. */
function registerResources(server: McpServer, client: SvcClient): void {
  const jsonResource = (uri: string, v: unknown) => ({
    contents: [{ uri, mimeType: 'application/json', text: JSON.stringify(v, null, 2) }],
  });
  server.registerResource(
    'vms',
    'svc://vms',
    { title: 'VMs', description: 'Every VM and its status', mimeType: 'application/json' },
    async (uri) => jsonResource(uri.href, await client.list()),
  );
  server.registerResource(
    'activity',
    'svc://activity',
    { title: 'Activity log', description: 'What the daemon did lately, newest last', mimeType: 'application/json' },
    async (uri) => jsonResource(uri.href, await client.activity({ limit: 200 })),
  );
  const list = async () => ({
    resources: (await client.list()).map((v) => ({
      uri: `svc://vms/${v.name}`,
      name: v.name,
      mimeType: 'application/json',
    })),
  });
  server.registerResource(
    'vm',
    new ResourceTemplate('svc://vms/{name}', { list }),
    { title: 'A VM', mimeType: 'application/json' },
    async (uri, { name }) => jsonResource(uri.href, await client.get(String(name))),
  );
  server.registerResource(
    'console',
    new ResourceTemplate('svc://vms/{name}/console', { list: undefined }),
    {
      title: "A VM's console log",
      description: `The last ${MCP_LIMITS.consoleBytes} bytes of its serial console`,
      mimeType: 'text/plain',
    },
    async (uri, { name }) => {
      const { data } = await readAll(
        client.logs(String(name), { tail: MCP_LIMITS.consoleBytes }),
        MCP_LIMITS.consoleBytes,
      );
      return { contents: [{ uri: uri.href, mimeType: 'text/plain', text: data.toString('utf8') }] };
    },
  );
}
