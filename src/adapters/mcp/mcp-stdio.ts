import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { SvcClient } from '../client/svc-client.js';
import { buildMcpServer, type McpPolicy } from './mcp-server.js';

/**
 * `svc mcp`: MCP over stdin/stdout until the client closes it. Nothing else may write to stdout.
 * The daemon is asked first whether it is a node of a cluster (`GET /nodes` answers only there).
 */
export async function serveMcpStdio(client: SvcClient, policy: McpPolicy): Promise<void> {
  const cluster = await client.nodes().then(
    () => true,
    () => false,
  );
  const server = buildMcpServer(client, policy, { cluster });
  const transport = new StdioServerTransport();
  const closed = new Promise<void>((resolve) => {
    transport.onclose = resolve;
    process.stdin.once('end', resolve);
  });
  await server.connect(transport);
  await closed;
  await server.close();
}
