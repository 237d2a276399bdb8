import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { SvcClient } from '../client/svc-client.js';
import {
  CHANGES,
  DESTROYS,
  type Extra,
  json,
  MCP_TAG,
  tool,
  vmName,
  type McpDaemon,
  type McpPolicy,
} from './mcp-kit.js';
import { placementArgs } from './mcp-cluster-tools.js';
import { z } from 'zod';
import { WAIT_MODES } from '../../domain/create-request.js';
import { specOf } from '../../domain/egress-secrets.js';

/**
 * The tools that make, change and remove VMs: create (within the policy's images and cap), delete,
 * the lifecycle verbs, clone, fork. On a node of a cluster a create may say where it goes.
 */
export function registerVmTools(server: McpServer, client: SvcClient, policy: McpPolicy, daemon: McpDaemon): void {
  let creating = 0;
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
        ...(daemon.cluster ? placementArgs : {}),
      },
      annotations: CHANGES,
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
      annotations: DESTROYS,
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
    server.registerTool(id, { title, description, inputSchema: { name: vmName }, annotations: CHANGES }, ({ name }) =>
      tool(async () => json(await run(name))),
    );
  }
  server.registerTool(
    'clone_vm',
    {
      title: 'Clone a VM',
      description:
        'A new VM from a stopped or suspended persistent VM (from its saved state when it has one: seconds), or from any VM as one of its named snapshots holds it (snapshot_vm).',
      inputSchema: {
        template: vmName.describe('the VM to clone'),
        name: vmName.optional(),
        persistent: z.boolean().optional(),
        snapshot: z
          .string()
          .optional()
          .describe("one of the VM's named snapshots: the new VM is the VM as it was then, whatever it does now"),
      },
      annotations: CHANGES,
    },
    ({ template, name, persistent, snapshot }) =>
      tool(async () => {
        await checkTemplate(template);
        await checkCap();
        return json(await client.clone(template, { name, persistent, snapshot, tags: { [MCP_TAG]: 'mcp' } }));
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
      annotations: CHANGES,
    },
    ({ name, count }) =>
      tool(async () => {
        await checkTemplate(name);
        await checkCap(count ?? 1);
        return json(await client.fork(name, { count: count ?? 1, tags: { [MCP_TAG]: 'mcp' } }));
      }),
  );
  registerSnapshotTools(server, client);
}

/** A VM's named snapshots: take one, go back to one, forget one (list_snapshots reads them). */
function registerSnapshotTools(server: McpServer, client: SvcClient): void {
  const snapshotName = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/);
  server.registerTool(
    'snapshot_vm',
    {
      title: 'Snapshot a VM',
      description:
        'Keeps the VM as it is now under a name, to go back to with revert_vm: a running VM with its memory and processes (held well under a second, then it runs on), a stopped one its disk. Take one before something risky.',
      inputSchema: {
        name: vmName,
        snapshot: snapshotName.optional().describe('its name (default snap-N)'),
        description: z.string().max(512).optional(),
      },
      annotations: CHANGES,
    },
    ({ name, snapshot, description }) =>
      tool(async () => json(await client.takeSnapshot(name, { name: snapshot, description }))),
  );
  server.registerTool(
    'revert_vm',
    {
      title: 'Revert a VM to a snapshot',
      description:
        'Puts the VM back to one of its snapshots, in place: everything since is lost (a running guest is stopped at once). A snapshot with memory resumes its guest as it ran; one without leaves the VM stopped (start_vm boots it). The snapshot stays, to revert to again.',
      inputSchema: { name: vmName, snapshot: snapshotName },
      annotations: DESTROYS,
    },
    ({ name, snapshot }) => tool(async () => json(await client.revert(name, snapshot))),
  );
  server.registerTool(
    'delete_snapshot',
    {
      title: 'Delete a snapshot',
      description: 'Forgets one snapshot of a VM; the VM itself is not changed. Cannot be undone.',
      inputSchema: { name: vmName, snapshot: snapshotName },
      annotations: DESTROYS,
    },
    ({ name, snapshot }) => tool(async () => json(await client.deleteSnapshot(name, snapshot))),
  );
}

/** When the policy allows it (`mcp_egress`): set a VM's egress policy, bind a host secret at egress. */
export function registerEgressTools(server: McpServer, client: SvcClient, policy: McpPolicy): void {
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
}
