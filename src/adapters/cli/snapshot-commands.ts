import type { Command } from 'commander';
import type { VmSnapshot } from '../../domain/snapshots.js';
import type { SvcClient } from '../client/svc-client.js';
import { print } from './cli-kit.js';
import { table } from './format.js';

/**
 * `svc snapshot create|ls|revert|rm`: a VM's named snapshots (docs/snapshots.md), as
 * `limactl snapshot create|list|apply|delete` and Multipass's `snapshot`/`restore` are.
 */
export function snapshotCommands(program: Command, client: () => SvcClient): void {
  const snap = program
    .command('snapshot')
    .description("a VM's named snapshots: take one, list them, revert to one, delete one");
  snap
    .command('create')
    .alias('take')
    .argument('<vm>')
    .argument('[snapshot]', 'its name (default snap-N)')
    .option('-d, --description <text>')
    .option('--json')
    .description(
      'snapshot a VM as it is now: a running one with its memory (held for a moment), a stopped one its disk',
    )
    .action(async (vm: string, name: string | undefined, o: { description?: string; json?: boolean }) => {
      const s = await client().takeSnapshot(vm, {
        ...(name ? { name } : {}),
        ...(o.description !== undefined ? { description: o.description } : {}),
      });
      print(o.json, s, () => `snapshot ${s.name} of vm ${vm} taken (${s.memory ? 'disk and memory' : 'disk'})`);
    });
  snap
    .command('ls')
    .alias('list')
    .argument('<vm>')
    .option('--json')
    .description("a VM's snapshots, oldest first")
    .action(async (vm: string, o: { json?: boolean }) => {
      const list = await client().snapshots(vm);
      print(o.json, list, () => (list.length ? snapshotRows(list) : `vm ${vm} has no snapshots`));
    });
  snap
    .command('revert')
    .alias('apply')
    .argument('<vm>')
    .argument('<snapshot>')
    .option('--json')
    .description(
      'put a VM back to a snapshot: a running guest is stopped at once; a snapshot with memory resumes its guest, one without leaves the VM stopped',
    )
    .action(async (vm: string, name: string, o: { json?: boolean }) => {
      const inst = await client().revert(vm, name);
      print(o.json, inst, () => `vm ${vm} reverted to snapshot ${name}: ${inst.status}`);
      if (inst.warning) console.error(`warning: ${inst.warning}`);
    });
  snap
    .command('rm')
    .alias('delete')
    .argument('<vm>')
    .argument('<snapshot>')
    .option('--json')
    .description('delete a snapshot (the VM is not changed)')
    .action(async (vm: string, name: string, o: { json?: boolean }) => {
      const r = await client().deleteSnapshot(vm, name);
      print(o.json, r, () => r.message);
    });
}

function snapshotRows(list: VmSnapshot[]): string {
  return table(
    list.map((s) => [
      s.name,
      s.created_at.replace(/\.\d+Z$/, 'Z'),
      s.memory ? 'disk+memory' : 'disk',
      s.taken_from,
      `${s.cpus} cpu/${s.memory_mb} MB/${s.disk_gb} GB`,
      s.description,
    ]),
    ['NAME', 'TAKEN', 'HOLDS', 'FROM', 'SHAPE', 'DESCRIPTION'],
  );
}
