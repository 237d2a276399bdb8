import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { SvcClient } from '../client/svc-client.js';
import {
  bounded,
  CHANGES,
  DEFAULT_TIMEOUT_S,
  DESTROYS,
  guestPath,
  json,
  MCP_LIMITS,
  text,
  timeoutSeconds,
  tool,
  vmName,
} from './mcp-kit.js';
import { z } from 'zod';
import { MAX_RESTARTS } from '../../domain/restart-policy.js';

/** The tools that act in a VM: exec, files, forwards, secrets, processes. */
export function registerGuestTools(server: McpServer, client: SvcClient): void {
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
        user: z
          .string()
          .max(41)
          .optional()
          .describe(
            'a user of the guest (name or number) to run as, in its home with its ids and login SHELL; default root',
          ),
        env: z
          .record(z.string(), z.string())
          .optional()
          .describe("extra environment variables (set in the command's environment, not on its command line)"),
        stdin: z.string().optional(),
        timeout_s: timeoutSeconds(`kill the command after this many seconds (default ${DEFAULT_TIMEOUT_S})`),
      },
      annotations: { readOnlyHint: false, destructiveHint: true, openWorldHint: true },
    },
    ({ name, cmd, args, cwd, user, env, stdin, timeout_s }) =>
      tool(async () => {
        const r = await client.exec(
          name,
          { cmd, args: args ?? [], cwd, user, env, timeoutMs: (timeout_s ?? DEFAULT_TIMEOUT_S) * 1000 },
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
      annotations: CHANGES,
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
      annotations: CHANGES,
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
      annotations: DESTROYS,
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
      annotations: CHANGES,
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
      annotations: CHANGES,
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
      annotations: CHANGES,
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
        restart: z
          .enum(['no', 'always', 'on-failure'])
          .optional()
          .describe('start it again when it ends (on-failure: unless it exited 0); its output goes on'),
        max_restarts: z
          .number()
          .int()
          .min(0)
          .max(MAX_RESTARTS)
          .optional()
          .describe('with restart: at most this many times'),
      },
      annotations: CHANGES,
    },
    ({ name, cmd, args, cwd, env, tag, restart, max_restarts }) =>
      tool(async () =>
        json(
          await client.startProcess(name, {
            cmd,
            args: args ?? [],
            cwd,
            env,
            tag,
            ...(restart && restart !== 'no' ? { restart, max_restarts } : {}),
          }),
        ),
      ),
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
      annotations: DESTROYS,
    },
    ({ name, id, signal }) =>
      tool(async () => {
        await client.signalProcess(name, id, signal ?? 'SIGTERM');
        return json(await client.process(name, id));
      }),
  );
}
