import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { VERSION } from '../../version.js';
import type { SvcClient } from '../client/svc-client.js';
import type { McpDaemon, McpPolicy } from './mcp-kit.js';
import { registerNodeReadTools, registerNodeTools } from './mcp-cluster-tools.js';
import { registerCodeTools } from './mcp-code-tools.js';
import { registerGuestTools } from './mcp-guest-tools.js';
import { registerReadTools } from './mcp-read-tools.js';
import { registerResources } from './mcp-resources.js';
import { registerEgressTools, registerVmTools } from './mcp-vm-tools.js';

export { isSecretPath, MCP_LIMITS, type McpDaemon, type McpPolicy } from './mcp-kit.js';

/**
 * The svc MCP server: tools, resources and safety switches over a SvcClient, so the same server
 * runs over stdio (`svc mcp`, talking to the daemon like the CLI) and inside the daemon at /mcp.
 */
export function buildMcpServer(client: SvcClient, policy: McpPolicy, daemon: McpDaemon): McpServer {
  const server = new McpServer(
    { name: 'svc', version: VERSION },
    {
      instructions:
        'svc runs Linux VMs (QEMU) on this host. Create a VM with create_vm (image "debian" has apt, python3 and systemd), run commands with exec, Python with run_code (a notebook kernel: state kept, figures as images), move files with read_file and write_file, and delete the VM when done.' +
        (daemon.cluster
          ? ' This daemon is a node of a cluster: every VM of every node is served here, list_nodes shows the nodes.'
          : '') +
        (policy.readOnly ? ' This server is read-only: it can look, not change.' : ''),
    },
  );

  registerReadTools(server, client, policy);
  registerResources(server, client);
  if (daemon.cluster) registerNodeReadTools(server, client);
  if (policy.readOnly) return server;
  registerVmTools(server, client, policy, daemon);
  if (daemon.cluster) registerNodeTools(server, client, policy);
  registerGuestTools(server, client);
  registerCodeTools(server, client);
  registerEgressTools(server, client, policy);
  return server;
}
