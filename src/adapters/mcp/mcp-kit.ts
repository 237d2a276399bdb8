/** What the MCP server's tool files share: the policy, limits, results, argument schemas. */

import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { posix } from 'node:path';
import { z } from 'zod';

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
  /**
   * On a node of a cluster: may MCP clients drain a node and end a drain (`drain_node`,
   * `undrain_node`)? Off by default: a drain moves every user's VMs, not the client's own.
   */
  nodes?: boolean;
}

/** What the daemon on the other end is, found out before the tools are offered. */
export interface McpDaemon {
  /** A node of a cluster (docs/cluster.md): the node tools exist, and a create may name its node. */
  cluster: boolean;
}

/** How much output a tool result carries: more is cut and the result says so. */
export const MCP_LIMITS = { execOutputBytes: 64 * 1024, readFileBytes: 1024 * 1024, consoleBytes: 64 * 1024 } as const;
export const MCP_TAG = 'svc.created-by';

export type Extra = {
  _meta?: { progressToken?: string | number };
  sendNotification: (n: {
    method: 'notifications/progress';
    params: { progressToken: string | number; progress: number; total?: number; message?: string };
  }) => Promise<void>;
};

export const text = (s: string): CallToolResult => ({ content: [{ type: 'text', text: s }] });
export const json = (v: unknown): CallToolResult => text(JSON.stringify(v, null, 2));

/** Output cut at `max` bytes, with what was cut said. */
export function bounded(s: string, max: number, what: string): string {
  const b = Buffer.from(s);
  if (b.length <= max) return s;
  return `${b.subarray(0, max).toString('utf8')}\n[${what} truncated: ${b.length - max} more bytes; narrow the command or redirect to a file and read it]`;
}

/** Runs a tool body; whatever it throws comes back as an MCP tool error with the daemon's message. */
export async function tool(body: () => Promise<CallToolResult>): Promise<CallToolResult> {
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

export async function readAll(body: AsyncIterable<unknown>, max: number): Promise<{ data: Buffer; more: boolean }> {
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

export const vmName = z
  .string()
  .regex(/^[a-z][a-z0-9-]{0,62}$/)
  .describe('the VM name');
export const guestPath = z.string().startsWith('/').describe('an absolute path in the guest');
/** How long a tool that runs something in a guest gives it unless told (`timeout_s`). */
export const DEFAULT_TIMEOUT_S = 300;
/** A tool's `timeout_s`: whole seconds up to an hour; `what` says what happens then (and the default). */
export const timeoutSeconds = (what: string) => z.number().int().min(1).max(3600).optional().describe(what);

/** Tool annotations: reads, changes, and changes that destroy. */
export const READS = { readOnlyHint: true, openWorldHint: false } as const;
export const CHANGES = { readOnlyHint: false, destructiveHint: false, openWorldHint: false } as const;
export const DESTROYS = { readOnlyHint: false, destructiveHint: true, openWorldHint: false } as const;
