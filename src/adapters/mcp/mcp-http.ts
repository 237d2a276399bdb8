import type { RouteDef } from '../http-kit/route.js';
import { onceGone } from '../http-kit/streams.js';
import type { SvcClient } from '../client/svc-client.js';
import type { McpDaemon, McpPolicy } from './mcp-server.js';

/** The SDK (and zod, ajv) load on the first MCP request, so a daemon nobody uses MCP with stays small. */
const sdk = async () => {
  const [{ StreamableHTTPServerTransport }, { buildMcpServer }] = await Promise.all([
    import('@modelcontextprotocol/sdk/server/streamableHttp.js'),
    import('./mcp-server.js'),
  ]);
  return { StreamableHTTPServerTransport, buildMcpServer };
};

/**
 * MCP over Streamable HTTP at /mcp, behind the daemon's auth like every route. Stateless: each
 * POST gets its own server and transport (no session to keep or leak), answered as JSON or an
 * SSE stream (progress notifications of a create). GET and DELETE, which only sessions use, are 405.
 */
export function mcpRoutes(client: SvcClient, policy: McpPolicy, daemon: McpDaemon): RouteDef[] {
  const noSessions: RouteDef['handler'] = (_req, res) => {
    res.setHeader('Allow', 'POST');
    res
      .status(405)
      .json({ error: 'this MCP endpoint is stateless: POST JSON-RPC messages to it', code: 'invalid_argument' });
  };
  return [
    {
      method: 'post',
      path: '/mcp',
      handler: async (req, res) => {
        const { StreamableHTTPServerTransport, buildMcpServer } = await sdk();
        const server = buildMcpServer(client, policy, daemon);
        const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
        // Registered after the SDK's import: a caller gone by then is gone already.
        onceGone(res, () => {
          void transport.close().catch(() => undefined);
          void server.close().catch(() => undefined);
        });
        await server.connect(transport);
        await transport.handleRequest(req, res, req.body);
      },
    },
    { method: 'get', path: '/mcp', handler: noSessions },
    { method: 'delete', path: '/mcp', handler: noSessions },
  ];
}
