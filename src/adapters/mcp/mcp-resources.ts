import { ResourceTemplate, type McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { SvcClient } from '../client/svc-client.js';
import { MCP_LIMITS, readAll } from './mcp-kit.js';

/** Resources: the VM list, one VM, the activity log, a VM's console log. */
export function registerResources(server: McpServer, client: SvcClient): void {
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
