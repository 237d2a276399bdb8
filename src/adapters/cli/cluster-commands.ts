import type { Command } from 'commander';
import type { NodeView } from '../../domain/cluster.js';
import type { SvcClient } from '../client/svc-client.js';
import { table } from './format.js';

const print = (asJson: boolean | undefined, value: unknown, text: () => string) =>
  console.log(asJson ? JSON.stringify(value, null, 2) : text());

/** `svc nodes [NODE]`: the nodes of a cluster (docs/cluster.md). */
export function clusterCommands(program: Command, client: () => SvcClient): void {
  program
    .command('nodes')
    .argument('[node]')
    .description('the nodes of the cluster this daemon is a node of, or one of them')
    .option('--json')
    .action(async (node: string | undefined, o: { json?: boolean }) => {
      if (node) {
        const n = await client().node(node);
        return print(o.json, n, () => nodeDetails(n));
      }
      const list = await client().nodes();
      print(o.json, list, () =>
        table(
          list.map((n) => [
            n.node,
            n.state,
            `${n.allocated.vms}/${n.capacity.vm_slots}`,
            `${n.allocated.cpus}/${n.capacity.cpus}`,
            `${n.allocated.memory_mb}/${n.capacity.memory_mb}M`,
            n.running,
            Object.entries(n.tags)
              .map(([k, v]) => `${k}=${v}`)
              .join(',') || '-',
            n.advertise,
          ]),
          ['NODE', 'STATE', 'VMS', 'CPUS', 'MEMORY', 'RUNNING', 'TAGS', 'ADVERTISE'],
        ),
      );
    });
}

function nodeDetails(n: NodeView): string {
  const rows: [string, string][] = [
    ['node', n.node],
    ['state', n.state],
    ['advertise', n.advertise],
    ['hypervisor', n.hypervisor],
    ['vms', `${n.allocated.vms} placed of ${n.capacity.vm_slots}, ${n.running} running`],
    ['cpus', `${n.allocated.cpus} placed of ${n.capacity.cpus}`],
    ['memory', `${n.allocated.memory_mb} MB placed of ${n.capacity.memory_mb} MB`],
    ['disk', `${n.allocated.disk_gb} GB placed of ${n.capacity.disk_gb} GB`],
    ['images', n.images.join(', ') || '-'],
    [
      'tags',
      Object.entries(n.tags)
        .map(([k, v]) => `${k}=${v}`)
        .join(', ') || '-',
    ],
    ['version', n.version],
    ['started', n.started_at],
    ['seen', n.seen_at],
  ];
  return rows.map(([k, v]) => `${k.padEnd(11)}${v}`).join('\n');
}
