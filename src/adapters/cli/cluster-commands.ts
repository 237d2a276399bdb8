import type { Command } from 'commander';
import type { NodeView } from '../../domain/cluster.js';
import type { SvcClient } from '../client/svc-client.js';
import { print } from './cli-kit.js';
import { table } from './format.js';

/** `svc nodes [NODE]`, `svc drain NODE`, `svc move NAME NODE`: a cluster (docs/cluster.md). */
export function clusterCommands(program: Command, client: () => SvcClient): void {
  program
    .command('move')
    .argument('<name>')
    .argument('[node]', 'where to (default: the node the placement rule picks among the others)')
    .description(
      'move a vm to another node of the cluster (a running or paused one is suspended for it and restored there, a paused one restored paused)',
    )
    .option('--json')
    .action(async (name: string, node: string | undefined, o: { json?: boolean }) => {
      const vm = await client().move(name, node);
      print(o.json, vm, () =>
        [`${vm.name} moved to node ${vm.node} (${vm.status})`, ...(vm.warning ? [`warning: ${vm.warning}`] : [])].join(
          '\n',
        ),
      );
    });
  program
    .command('drain')
    .argument('<node>')
    .description('move what can move off a node and place nothing new on it (--undo ends that)')
    .option('--undo', 'end the drain: creates may be placed on the node again')
    .option('--json')
    .action(async (node: string, o: { json?: boolean; undo?: boolean }) => {
      if (o.undo) {
        const n = await client().undrain(node);
        return print(o.json, n, () => `node ${n.node} takes creates again`);
      }
      const r = await client().drain(node);
      print(o.json, r, () =>
        [
          `node ${r.node} drained: nothing new is placed on it`,
          ...r.moved.map((m) => `moved    ${m.name} to ${m.node}${m.warning ? ` (warning: ${m.warning})` : ''}`),
          ...r.refused.map((m) => `kept     ${m.name}: ${m.reason}`),
        ].join('\n'),
      );
      if (r.refused.length) process.exitCode = 1;
    });
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
    ['draining', n.draining ? 'yes: nothing new is placed on it' : 'no'],
    ['version', n.version],
    ['started', n.started_at],
    ['seen', n.seen_at],
  ];
  return rows.map(([k, v]) => `${k.padEnd(11)}${v}`).join('\n');
}
