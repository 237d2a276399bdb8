import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import type { SvcClient } from '../client/svc-client.js';
import { NODE_NAME } from '../../domain/cluster.js';
import { CHANGES, json, READS, tool, vmName, type McpPolicy } from './mcp-kit.js';

/** A node's name, as the daemon checks it (domain/cluster.ts). */
export const nodeName = z.string().regex(NODE_NAME).describe('a node of the cluster (list_nodes)');

/** What `create_vm` takes on a node of a cluster: where the VM goes (docs/cluster.md, "Placement"). */
export const placementArgs = {
  node: nodeName.optional().describe('create it on this node (default: the placement rule picks one)'),
  node_selector: z
    .record(z.string(), z.string())
    .optional()
    .describe('only on nodes whose tags carry every pair, such as {"zone": "a"}'),
};

/** The nodes of the cluster, for every server of a node, read-only ones too. */
export function registerNodeReadTools(server: McpServer, client: SvcClient): void {
  server.registerTool(
    'list_nodes',
    {
      title: 'List the nodes of the cluster',
      description:
        'Every svcd node of the cluster this daemon is a node of: its state (ready, or unreachable when its lease lapsed), whether it is drained, its capacity (cpus, memory, disk, VM slots), what is placed on it, its tags, images and hypervisor.',
      annotations: READS,
    },
    () => tool(async () => json(await client.nodes())),
  );
}

/** Moving a VM to another node; with the policy's `nodes`, draining a node and ending a drain. */
export function registerNodeTools(server: McpServer, client: SvcClient, policy: McpPolicy): void {
  server.registerTool(
    'move_vm',
    {
      title: 'Move a VM to another node',
      description:
        'Carries a VM with its disk and saved state to another node of the cluster: a stopped or suspended one as it is, a running or paused one suspended for the move and restored there (its processes go on; a paused one is restored paused there). Without node, the placement rule picks one of the others. Its name, files and snapshots go with it.',
      inputSchema: { name: vmName, node: nodeName.optional() },
      annotations: CHANGES,
    },
    ({ name, node }) => tool(async () => json(await client.move(name, node))),
  );
  if (!policy.nodes) return;
  server.registerTool(
    'drain_node',
    {
      title: 'Drain a node',
      description:
        'Places nothing new on the node and moves its VMs to the others (running and paused ones suspended for the move and restored there, paused ones restored paused); what cannot move stays and is named with its reason. undrain_node ends the drain.',
      inputSchema: { node: nodeName },
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    ({ node }) => tool(async () => json(await client.drain(node))),
  );
  server.registerTool(
    'undrain_node',
    {
      title: 'End a drain',
      description: 'Creates may be placed on the node again (VMs moved away stay where they went).',
      inputSchema: { node: nodeName },
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    ({ node }) => tool(async () => json(await client.undrain(node))),
  );
}
