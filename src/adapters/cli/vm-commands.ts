import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Option, type Command } from 'commander';
import type { WaitMode } from '../../domain/create-request.js';
import type { OnExpire } from '../../domain/lifetime.js';
import type { Instance } from '../../domain/vm.js';
import { SvcError, type CreateInput, type SvcClient } from '../client/svc-client.js';
import { collect, errorText, Exit, print, progress, restartOption, size, whole } from './cli-kit.js';
import { egressFlags, egressSecretFlag, policyFromFlags, secretsFromFlags } from './egress-commands.js';
import { table } from './format.js';

/**
 * A clone's template as the command line names it: `VM`, or `VM:SNAPSHOT` for one of its named
 * snapshots (as an image's tag is written); `--snapshot` says the same, and the two must agree.
 */
export function templateRef(ref: string, flag?: string): { from: string; snapshot?: string } {
  const at = ref.indexOf(':');
  const snapshot = at < 0 ? flag : ref.slice(at + 1);
  if (at >= 0 && flag !== undefined && flag !== snapshot)
    throw new Error(`${ref} names snapshot ${snapshot}, and --snapshot ${flag}: give one`);
  if (snapshot === '') throw new Error(`${ref}: no snapshot after the colon (VM:SNAPSHOT)`);
  return { from: at < 0 ? ref : ref.slice(0, at), ...(snapshot !== undefined ? { snapshot } : {}) };
}

/** The VMs' commands: ls, new, clone, ttl, fork, pool, get, rm and the lifecycle verbs. */
export function vmCommands(program: Command, client: () => SvcClient): void {
  program
    .command('ls')
    .description('list VMs')
    .option('--json')
    .option('--names', 'names only')
    .action(async (o) => {
      const list = await client().list();
      if (o.names) return void process.stdout.write(list.map((i) => i.name).join('\n') + (list.length ? '\n' : ''));
      print(o.json, list, () => (list.length ? vmRows(list) : 'no vms'));
    });

  egressSecretFlag(egressFlags(program.command('new')))
    .alias('create')
    .argument('[name]')
    .description('create a VM and wait until it is ready')
    .option('-p, --persistent', 'keep the VM (and its disk) across shutdowns')
    .option('--cpus <n>', 'vCPUs', whole('a whole number of vCPUs'))
    .option('--memory <mb>', 'memory in MB, or with a unit: 2g', size('MB', '1024 or 2g'))
    .option('--disk <gb>', 'disk in GB, or with a unit: 20G', size('GB', '10 or 20G'))
    .option('--image <id>')
    .option('--tag <k=v>', 'tag (repeatable)', collect, [])
    .option('--userdata <file>', 'userdata script or cloud-config file')
    .option('-P, --publish <host:guest[/udp]>', 'forward a host port at boot (repeatable)', collect, [])
    .option('--no-metrics', 'do not keep a stats history')
    .option('--no-entrypoint', "do not run the image's entrypoint (a container image's Entrypoint and Cmd) at boot")
    .option(
      '--entrypoint-restart <policy>',
      'start the entrypoint again when it ends: always, on-failure or on-failure:N',
    )
    .option(
      '--from <template>',
      'clone a stopped or suspended persistent VM (from its snapshot); VM:SNAPSHOT, one of its named snapshots',
    )
    .option('--pool', 'claim a warm pool member')
    .option('--node <node>', 'in a cluster: the node to create it on')
    .option('--node-selector <k=v>', 'in a cluster: only nodes with this tag (repeatable)', collect, [])
    .option('-m, --mount <host:guest[:ro]>', 'share a host directory (repeatable)', collect, [])
    .option('--ttl <duration>', 'its lifetime, e.g. 30m or 2h: then it is deleted (or suspended: --on-expire)')
    .addOption(new Option('--on-expire <action>', 'what the end of --ttl does').choices(['delete', 'suspend']))
    .addOption(
      new Option('--wait <mode>', 'readiness to wait for').choices(['auto', 'ssh', 'agent', 'userdata', 'bootstrap']),
    )
    .option('--timeout <duration>', 'create deadline, e.g. 3m')
    .option('--json', 'print the Instance as JSON')
    .action(async (name: string | undefined, o) => {
      const req: CreateInput = { persistent: !!o.persistent };
      if (name) req.name = name;
      if (o.cpus !== undefined) req.cpus = o.cpus;
      if (o.memory !== undefined) req.memory_mb = o.memory;
      if (o.disk !== undefined) req.disk_gb = o.disk;
      if (o.image) req.image = o.image;
      if (o.metrics === false) req.metrics_enabled = false;
      if (o.entrypoint === false) req.entrypoint = false;
      else if (o.entrypointRestart) {
        const r = restartOption(o.entrypointRestart as string);
        if (r.restart) req.entrypoint = { restart: r.restart, max_restarts: r.max_restarts };
      }
      if (o.from) Object.assign(req, templateRef(o.from as string));
      if (o.pool) req.from_pool = true;
      if (o.ttl) req.ttl = o.ttl;
      if (o.onExpire) req.on_expire = o.onExpire as OnExpire;
      if (o.node) req.node = o.node;
      if (o.nodeSelector.length) req.node_selector = keyValues(o.nodeSelector, '--node-selector');
      const egress = policyFromFlags(o);
      if (egress) req.egress = egress as CreateInput['egress'];
      const bindings = secretsFromFlags(o);
      if (bindings.length) req.egress_secrets = bindings;
      if (o.mount.length) req.mounts = mountsFromFlags(o.mount);
      if (o.userdata) req.userdata = readFileSync(o.userdata, 'utf8');
      if (o.tag.length) req.tags = keyValues(o.tag, '--tag');
      if (o.publish.length) {
        req.forwards = (o.publish as string[]).map((p) => {
          const m = /^(?:(\d+):)?(\d+)(?:\/(tcp|udp))?$/.exec(p);
          if (!m) throw new Error(`-P ${p}: use [host:]guest[/udp]`);
          return {
            host_port: m[1] ? Number(m[1]) : 0,
            guest_port: Number(m[2]),
            proto: (m[3] ?? 'tcp') as 'tcp' | 'udp',
          };
        });
      }
      const tty = !!process.stderr.isTTY;
      let inst: Instance | undefined;
      for await (const e of client().createStream(req, { wait: o.wait as WaitMode | undefined, timeout: o.timeout })) {
        if (!o.json) progress(e, tty);
        if (e.phase === 'error') throw new SvcError(500, e.error ?? e.message, e.code);
        if (e.phase === 'ready') inst = e.instance;
      }
      if (!inst) throw new SvcError(502, 'the create stream ended without ready or error');
      print(o.json, inst, () => vmRows([inst!]));
      warn(inst);
    });

  program
    .command('clone')
    .argument('<template>')
    .argument('[name]')
    .option('-p, --persistent')
    .option('--json')
    .option(
      '-m, --mount <host:guest[:ro]>',
      'share a host directory (repeatable; 9p: added as the clone wakes)',
      collect,
      [],
    )
    .option(
      '-s, --snapshot <name>',
      'the VM as this named snapshot of it holds it, whatever it does now (docs/snapshots.md)',
    )
    .description('clone a stopped or suspended persistent VM, or one of its named snapshots (VM:SNAPSHOT or -s)')
    .addHelpText(
      'after',
      '\nA clone may take a QEMU started ahead for its template: ps then shows it as svc-spare-<hex>,\n' +
        "since a running process cannot be renamed. svc get NAME names the clone's process (pid).",
    )
    .action(async (ref: string, name: string | undefined, o) => {
      const { from: template, snapshot } = templateRef(ref, o.snapshot as string | undefined);
      const inst = await client().clone(template, {
        ...(name ? { name } : {}),
        ...(snapshot ? { snapshot } : {}),
        persistent: !!o.persistent,
        ...(o.mount.length ? { mounts: mountsFromFlags(o.mount) } : {}),
      });
      print(o.json, inst, () => vmRows([inst]));
      warn(inst);
    });

  program
    .command('edit')
    .argument('<name>')
    .option('--cpus <n>', 'vCPUs', whole('a whole number of vCPUs'))
    .option('--memory <mb>', 'memory in MB, or with a unit: 2g', size('MB', '1024 or 2g'))
    .option(
      '--disk <gb>',
      'disk in GB (or with a unit: 20G), at least what it has (a disk only grows)',
      size('GB', '10 or 20G'),
    )
    .option('--json')
    .description("change a stopped VM's CPUs, memory or disk for its next boot (svc stop NAME first)")
    .action(async (name: string, o) => {
      if (o.cpus === undefined && o.memory === undefined && o.disk === undefined)
        throw new Error('give --cpus, --memory or --disk');
      const inst = await client().edit(name, { cpus: o.cpus, memory_mb: o.memory, disk_gb: o.disk });
      print(o.json, inst, () => `vm ${name}: ${inst.cpus} vCPUs, ${inst.memory_mb} MB, ${inst.disk_gb} GB disk`);
    });

  program
    .command('ttl')
    .argument('<name>')
    .argument(
      '<duration>',
      "a lifetime from now, e.g. 30m or 2h; 'none' (or 'never', 'off') to keep the VM until deleted",
    )
    .addOption(
      new Option('--on-expire <action>', 'what its end does (default: as before, delete at first)').choices([
        'delete',
        'suspend',
      ]),
    )
    .option('--json')
    .description("set a VM's lifetime: at its end the VM is deleted, or suspended")
    .action(async (name: string, duration: string, o) => {
      const inst = await client().setTtl(
        name,
        /^(none|never|off)$/i.test(duration) ? null : duration,
        o.onExpire as OnExpire | undefined,
      );
      print(o.json, inst, () =>
        inst.expires_at
          ? `vm ${name} ends ${inst.expires_at}, then ${inst.on_expire}`
          : `vm ${name} lives until deleted`,
      );
    });

  program
    .command('fork')
    .argument('<vm>')
    .option('-n, --count <n>', 'how many forks (1 to 100)', whole('a whole number of forks, 1 to 100'))
    .option('--name <name...>', "the forks' names (default: VM-fork-N)")
    .option('--tag <k=v>', 'a tag every fork carries (repeatable)', collect, [])
    .option('-p, --persistent')
    .option('--json')
    .description('fork a running or paused VM: copies of it as it is now, each its own machine')
    .action(async (vm: string, o) => {
      const out = await client().fork(vm, {
        ...(o.count !== undefined ? { count: o.count as number } : {}),
        ...(o.name ? { names: o.name as string[] } : {}),
        ...(o.tag.length ? { tags: keyValues(o.tag as string[], '--tag') } : {}),
        persistent: !!o.persistent,
      });
      print(o.json, out, () => `${vmRows(out.vms)}\n(${vm} was held ${out.paused_ms} ms while it was captured)`);
    });

  program
    .command('pool')
    .option('--json')
    .description('the warm pool')
    .action(async (o) => {
      const p = await client().pool();
      print(o.json, p, () =>
        p.size
          ? `template ${p.template}: ${p.ready}/${p.size} ready\n${table(
              p.members.map((m) => [m.name, m.status]),
              ['MEMBER', 'STATUS'],
            )}`
          : "no warm pool configured (warm_pool: {template: NAME, size: N} in the daemon's config keeps N clones of a persistent VM ready for svc new --pool; docs/config.md)",
      );
    });

  program
    .command('get')
    .argument('<name>')
    .option('--json')
    .description('show a VM')
    .action(async (name: string, o) => {
      const i = await client().get(name);
      print(o.json, i, () => vmDetails(i));
    });

  program
    .command('rm')
    .argument('<names...>')
    .description('delete VMs, whatever their state')
    .action(async (names: string[]) => eachName(names, async (n) => console.log((await client().delete(n)).message)));

  for (const [verb, desc] of [
    ['start', 'start a stopped VM'],
    ['stop', 'shut a VM down (ephemeral VMs are removed)'],
    ['pause', 'pause'],
    ['resume', 'resume'],
    ['suspend', 'save state and stop'],
    ['restore', 'start from the saved state'],
  ] as const) {
    const cmd = program
      .command(verb)
      .argument('<names...>')
      .option('--json', "print the daemon's answer as JSON (an array of them for several)")
      .description(`${desc} (several: each in turn)`);
    if (verb === 'restore') cmd.option('--paused', 'keep the guest paused once loaded (it wakes at svc resume)');
    cmd.action(async (names: string[], o: { json?: boolean; paused?: boolean }) => {
      const c = client();
      const outs: object[] = [];
      try {
        await eachName(names, async (name) => {
          const out =
            verb === 'stop'
              ? await c.shutdown(name)
              : verb === 'restore'
                ? await c.restore(name, { paused: o.paused })
                : await c[verb](name);
          if (o.json) outs.push(out);
          else console.log('message' in out ? out.message : `vm ${out.name} is ${out.status}`);
          warn(out);
        });
      } finally {
        if (o.json && outs.length) print(true, names.length === 1 ? outs[0] : outs, () => '');
      }
    });
  }
}

/** `k=v` flags (--tag, --node-selector) as a mapping. */
function keyValues(given: string[], flag: string): Record<string, string> {
  return Object.fromEntries(
    given.map((t) => {
      const i = t.indexOf('=');
      if (i < 1) throw new Error(`${flag} ${t}: use key=value`);
      return [t.slice(0, i), t.slice(i + 1)];
    }),
  );
}

/** The table `svc ls` prints. */
function vmRows(list: (Instance & { node?: string })[]): string {
  // In a cluster every VM says its node (docs/cluster.md).
  const nodes = list.some((i) => i.node);
  return table(
    list.map((i) => [
      i.name,
      ...(nodes ? [i.node ?? '-'] : []),
      i.status,
      i.persistent ? 'yes' : 'no',
      i.cpus,
      `${i.memory_mb}M`,
      `${i.disk_gb}G`,
      i.image,
      i.ssh_port || '-',
      i.agent_port || '-',
      i.forwards.map((f) => `${f.host_port}->${f.guest_port}/${f.proto}`).join(',') || '-',
    ]),
    [
      'NAME',
      ...(nodes ? ['NODE'] : []),
      'STATUS',
      'PERSISTENT',
      'CPUS',
      'MEMORY',
      'DISK',
      'IMAGE',
      'SSH',
      'AGENT',
      'FORWARDS',
    ],
  );
}

/** Every field of one VM, a line each (svc get): what `ls` leaves out is what a user asks get for. */
function vmDetails(i: Instance): string {
  const rows: [string, string][] = [
    ['name', i.name],
    ...((i as { node?: string }).node ? [['node', (i as { node?: string }).node!] as [string, string]] : []),
    ['status', i.status + (i.suspended_at ? ` (since ${i.suspended_at})` : '')],
    ...(i.error ? [['error', i.error] as [string, string]] : []),
    ['persistent', i.persistent ? 'yes' : 'no'],
    ['image', i.image + (i.from ? ` (cloned from ${i.from})` : '')],
    ['cpus', String(i.cpus)],
    ['memory', `${i.memory_mb} MB`],
    ['disk', `${i.disk_gb} GB`],
    // Every VM has its own network, so most have the same address on it (10.0.2.15).
    ['address', i.ip ? `${i.ip} (on its own network; reach it through forwards)` : '-'],
    ['ssh', i.ssh_port ? `127.0.0.1:${i.ssh_port}` : '-'],
    ['agent', i.agent_cid ? `vsock ${i.agent_cid}` : i.agent_port ? `127.0.0.1:${i.agent_port}` : '-'],
    // A clone may run in a QEMU started ahead for it, which ps shows under that spare's name.
    ['process', i.pid ? `pid ${i.pid} (in ps a clone may show its spare's name, svc-spare-...)` : '-'],
    ['forwards', i.forwards.map((f) => `127.0.0.1:${f.host_port} -> ${f.guest_port}/${f.proto}`).join(', ') || '-'],
    ['mounts', i.mounts.map((m) => `${m.host} -> ${m.guest}${m.readonly ? ' (ro)' : ''}`).join(', ') || '-'],
    [
      'egress',
      `${i.egress.default}${i.egress.allow.length ? `; allow ${i.egress.allow.join(' ')}` : ''}${i.egress.deny.length ? `; deny ${i.egress.deny.join(' ')}` : ''}`,
    ],
    [
      'tags',
      Object.entries(i.tags)
        .map(([k, v]) => `${k}=${v}`)
        .join(', ') || '-',
    ],
    ['metrics', i.metrics_enabled ? 'kept' : 'off'],
    [
      'expires',
      i.expires_at ? `${i.expires_at}, then ${i.on_expire ?? 'delete'} (svc ttl ${i.name} none: never)` : 'never',
    ],
    ['created', i.created_at],
    ['updated', i.updated_at],
  ];
  const w = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `${k.padEnd(w)}  ${v}`).join('\n');
}

/**
 * `act` for each VM named, in turn, as docker rm and docker stop take several: one that fails is
 * said and the others still go, and the exit code is 1 if any failed. One name alone fails as any
 * command does, and so does a daemon that cannot be reached (exit 3), which no later name reaches.
 */
async function eachName(names: string[], act: (name: string) => Promise<void>): Promise<void> {
  let failed = 0;
  for (const name of names) {
    try {
      await act(name);
    } catch (err) {
      if (names.length === 1 || (err instanceof SvcError && err.status === 0)) throw err;
      process.stderr.write(`svc: ${errorText(err)}\n`);
      failed++;
    }
  }
  if (failed) throw new Exit(1);
}

/** What the daemon says of a call that worked but not as asked (a restore or clone that cold-booted): on stderr, whatever the output's form. */
function warn(out: object): void {
  if ('warning' in out && typeof out.warning === 'string') console.error(`warning: ${out.warning}`);
}

/** `--mount host:guest[:ro]` flags as mounts, the host path made absolute. */
function mountsFromFlags(flags: string[]): NonNullable<CreateInput['mounts']> {
  return flags.map((m) => {
    const [host, guest, flag] = m.split(':');
    if (!host || !guest || (flag && flag !== 'ro')) throw new Error(`--mount ${m}: use host:guest[:ro]`);
    return { host: resolve(host), guest, ...(flag ? { readonly: true } : {}) };
  });
}
