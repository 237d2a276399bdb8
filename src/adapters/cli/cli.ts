import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import type { WaitMode } from '../../domain/create-request.js';
import type { Instance } from '../../domain/vm.js';
import type { OnExpire } from '../../domain/lifetime.js';
import { parseDuration } from '../../domain/duration.js';
import { SvcClient, SvcError, type CreateInput } from '../client/svc-client.js';
import { completionScript } from './completion.js';
import { egressCommands, egressFlags, egressSecretFlag, policyFromFlags, secretsFromFlags } from './egress-commands.js';
import { copy, parseEndpoint } from './copy.js';
import { bytes, ms, sparkline, table } from './format.js';
import { interactiveShell } from './interactive-shell.js';
import { processCommands, processLogs, ProcessExit } from './process-commands.js';
import { clusterCommands } from './cluster-commands.js';
import { collect, print, progress } from './cli-kit.js';
import { forwardCommands, guestFileCommands, secretCommands } from './guest-commands.js';
import { imageCommands } from './image-commands.js';

/** Thrown to leave with a given exit code (the remote command's, the shell's). */
class Exit extends Error {
  constructor(readonly code: number) {
    super(`exit ${code}`);
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

/** A flag's whole number: commander then says which flag and echoes what was typed. */
const whole =
  (what: string) =>
  (v: string): number => {
    if (!/^\d+$/.test(v.trim())) throw new InvalidArgumentError(`expected ${what}`);
    return Number(v);
  };

/**
 * Every command's usage error ends with one line that names its own help, never the whole help
 * (commander's default with showHelpAfterError()).
 */
function helpHints(cmd: Command, path: string[] = []): void {
  const here = [...path, ...(cmd.parent ? [cmd.name()] : [])];
  cmd.showHelpAfterError(`(see: svc${here.length ? ` ${here.join(' ')}` : ''} --help)`);
  for (const sub of cmd.commands) helpHints(sub, here);
}

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

export function buildCli(): Command {
  const program = new Command('svc')
    .description('svc: lightweight QEMU VMs, their agents, files, shells and ports')
    .option('--socket <path>', 'daemon Unix socket (env SVC_SOCKET; default from the config, ~/.svc/svc.sock)')
    .option('--api <url>', 'daemon URL such as http://127.0.0.1:7474 (env SVC_API)')
    .option('--token <token>', "bearer token (env SVC_TOKEN; default the config's api_token)")
    .option('--config <file>', "the daemon's config file, for its socket and token (env SVC_CONFIG)")
    .configureOutput({ writeErr: (s) => process.stderr.write(s) });
  const client = () => {
    const o = program.opts<{ socket?: string; api?: string; token?: string; config?: string }>();
    return new SvcClient({ socket: o.socket, api: o.api, token: o.token, config: o.config });
  };

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
    .option('--memory <mb>', 'memory in MB', whole('a whole number of MB, such as 1024'))
    .option('--disk <gb>', 'disk in GB', whole('a whole number of GB, such as 10'))
    .option('--image <id>')
    .option('--tag <k=v>', 'tag (repeatable)', collect, [])
    .option('--userdata <file>', 'userdata script or cloud-config file')
    .option('-P, --publish <host:guest[/udp]>', 'forward a host port at boot (repeatable)', collect, [])
    .option('--no-metrics', 'do not keep a stats history')
    .option('--from <template>', 'clone a stopped or suspended persistent VM (from its snapshot)')
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
      if (o.from) req.from = o.from;
      if (o.pool) req.from_pool = true;
      if (o.ttl) req.ttl = o.ttl;
      if (o.onExpire) req.on_expire = o.onExpire as OnExpire;
      if (o.node) req.node = o.node;
      if (o.nodeSelector.length) req.node_selector = keyValues(o.nodeSelector, '--node-selector');
      const egress = policyFromFlags(o);
      if (egress) req.egress = egress as CreateInput['egress'];
      const bindings = secretsFromFlags(o);
      if (bindings.length) req.egress_secrets = bindings;
      if (o.mount.length) {
        req.mounts = (o.mount as string[]).map((m) => {
          const [host, guest, flag] = m.split(':');
          if (!host || !guest || (flag && flag !== 'ro')) throw new Error(`--mount ${m}: use host:guest[:ro]`);
          return { host: resolve(host), guest, ...(flag ? { readonly: true } : {}) };
        });
      }
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
    .description('clone a stopped or suspended persistent VM')
    .addHelpText(
      'after',
      '\nA clone may take a QEMU started ahead for its template: ps then shows it as svc-spare-<hex>,\n' +
        "since a running process cannot be renamed. svc get NAME names the clone's process (pid).",
    )
    .action(async (template: string, name: string | undefined, o) => {
      const inst = await client().clone(template, { ...(name ? { name } : {}), persistent: !!o.persistent });
      print(o.json, inst, () => vmRows([inst]));
      warn(inst);
    });

  program
    .command('ttl')
    .argument('<name>')
    .argument('<duration>', "a lifetime from now, e.g. 30m or 2h; 'none' to keep the VM until deleted")
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
        duration === 'none' ? null : duration,
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

  imageCommands(program, client);

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
          : 'no warm pool configured',
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
    .action(async (names: string[]) => {
      for (const n of names) console.log((await client().delete(n)).message);
    });

  for (const [verb, desc] of [
    ['start', 'start a stopped VM'],
    ['stop', 'shut a VM down (ephemeral VMs are removed)'],
    ['pause', 'pause'],
    ['resume', 'resume'],
    ['suspend', 'save state and stop'],
    ['restore', 'start from the saved state'],
  ] as const) {
    program
      .command(verb)
      .argument('<name>')
      .option('--json')
      .description(desc)
      .action(async (name: string, o) => {
        const c = client();
        const out = verb === 'stop' ? await c.shutdown(name) : await c[verb](name);
        print(o.json, out, () => ('message' in out ? out.message : `vm ${out.name} is ${out.status}`));
        warn(out);
      });
  }

  program
    .command('x')
    .alias('exec')
    .argument('<name>')
    .argument('<cmd>')
    .argument('[args...]')
    .description('run a command in a VM: svc x NAME -- CMD ARGS...')
    .option('--cwd <dir>')
    .option('--uid <n>', 'user id (HOME and USER follow it when the guest knows the user)', whole('a numeric user id'))
    .option('--gid <n>', 'group id', whole('a numeric group id'))
    .option('--timeout <duration>')
    .action(async (name: string, cmd: string, args: string[], o) => {
      const stdin = process.stdin.isTTY ? undefined : process.stdin;
      let code = 0;
      for await (const f of client().execStream(
        name,
        {
          cmd,
          args,
          cwd: o.cwd,
          uid: o.uid,
          gid: o.gid,
          timeoutMs: o.timeout ? parseDuration(o.timeout, 'timeout') : undefined,
        },
        stdin,
      )) {
        if (f.type === 'stdout') process.stdout.write(f.data ?? '');
        else if (f.type === 'stderr') process.stderr.write(f.data ?? '');
        else if (f.type === 'error') process.stderr.write(`svc: ${f.error}\n`);
        else if (f.type === 'exit') code = f.exit_code ?? 1;
      }
      if (code < 0) {
        process.stderr.write(
          `svc: ${cmd} did not end within ${o.timeout ?? 'its timeout'}; it was killed (exit 124)\n`,
        );
        throw new Exit(124);
      }
      throw new Exit(code);
    });

  program
    .command('sh')
    .argument('<name>')
    .option('--shell <path>')
    .option('-u, --user <user>', "a user of the guest to log in as (such as svc, the debian image's); default root")
    .description('open an interactive shell in a VM')
    .action(async (name: string, o) => {
      throw new Exit(await interactiveShell(client(), name, { shell: o.shell, user: o.user }));
    });

  program
    .command('cp')
    .argument('<src>')
    .argument('<dst>')
    .description('copy files: NAME:/path on one side; directories go as tar')
    .action(async (src: string, dst: string) =>
      copy(client(), parseEndpoint(src), parseEndpoint(dst), !!process.stderr.isTTY),
    );

  guestFileCommands(program, client);
  forwardCommands(program, client);
  secretCommands(program, client);

  program
    .command('stats')
    .argument('<name>')
    .option('--json')
    .action(async (name: string, o) => {
      const s = await client().stats(name);
      print(o.json, s, () =>
        table(
          [
            [
              ms(Math.round(s.uptime_sec * 1000)),
              `${s.load1} ${s.load5} ${s.load15}`,
              s.cpus,
              `${bytes(s.mem_total_bytes - s.mem_available_bytes)} / ${bytes(s.mem_total_bytes)}`,
              s.disk_total_bytes
                ? `${bytes(s.disk_total_bytes - (s.disk_free_bytes ?? 0))} / ${bytes(s.disk_total_bytes)}`
                : '-',
            ],
          ],
          ['UPTIME', 'LOAD', 'CPUS', 'MEMORY', 'DISK'],
        ),
      );
    });

  program
    .command('metrics')
    .argument('<name>')
    .option('--limit <n>', 'points', whole('a whole number of points'))
    .option('--json')
    .description('stats history as a small chart')
    .action(async (name: string, o) => {
      const m = await client().metricsHistory(name, { limit: o.limit });
      print(o.json, m, () => {
        if (m.points.length === 0)
          return `no samples yet (every ${m.interval_sec}s while running${m.enabled ? '' : '; sampling is disabled for this vm'})`;
        const used = m.points.map((p) => p.mem_total_bytes - p.mem_available_bytes);
        const first = new Date(m.points[0].t_ms).toISOString();
        const last = new Date(m.points.at(-1)!.t_ms).toISOString();
        return [
          `${m.points.length} samples, every ${m.interval_sec}s, ${first} .. ${last}`,
          `mem used ${sparkline(used)} ${bytes(used.at(-1))}`,
          `load1    ${sparkline(m.points.map((p) => p.load1))} ${m.points.at(-1)!.load1}`,
        ].join('\n');
      });
    });

  program
    .command('activity')
    .option('--limit <n>', 'entries', Number, 20)
    .option('--json')
    .action(async (o) => {
      const ev = await client().activity({ limit: o.limit });
      print(o.json, ev, () =>
        table(
          ev.map((e) => [e.id, e.t, e.action, e.target, e.status, ms(e.duration_ms), e.message]),
          ['ID', 'TIME', 'ACTION', 'TARGET', 'STATUS', 'TOOK', 'MESSAGE'],
        ),
      );
    });

  program
    .command('events')
    .option('--json', "the feed's NDJSON lines as they come")
    .description('follow VM changes (create, every state change, delete) until interrupted')
    .action(async (o) => {
      const ac = new AbortController();
      process.once('SIGINT', () => ac.abort());
      for await (const ev of client().events({ signal: ac.signal })) {
        if (o.json) console.log(JSON.stringify(ev));
        else if (ev.event === 'snapshot') for (const v of ev.vms) console.log(`${v.name} ${v.status}`);
        else if (ev.event === 'vm') console.log(`${ev.vm.name} ${ev.vm.status}`);
        else if (ev.event === 'removed') console.log(`${ev.name} removed`);
        else if (ev.event === 'overflow') console.error(ev.message);
      }
    });

  program
    .command('info')
    .option('--json')
    .action(async (o) => {
      const c = client();
      const i = await c.info();
      print(o.json, i, () =>
        table(
          [[i.name, i.version, i.api_version, i.hypervisor, c.where]],
          ['NAME', 'VERSION', 'API', 'HYPERVISOR', 'DAEMON'],
        ),
      );
    });

  program
    .command('agent')
    .description('the guest agent')
    .command('deploy')
    .argument('<name>')
    .option('--json')
    .description(
      'install the svc agent over SSH (images without one, such as imported cloud disks) and wait until it answers',
    )
    .action(async (name: string, o) => {
      const r = await client().deployAgent(name);
      print(o.json, r, () => `agent ${r.agent_version} runs in vm ${r.name}`);
    });

  program
    .command('logs')
    .argument('<name>')
    .argument('[process]', "a durable process's id or tag: its output instead of the console's")
    .option('-f, --follow', 'keep printing as the log grows')
    .option('--tail <bytes>', 'last N bytes (the console log)', whole('a whole number of bytes'))
    .option('--from <offset>', "a process's output from this byte (N, or stdout:N,stderr:M)")
    .description("the guest serial console log, or a durable process's output")
    .action(async (name: string, proc: string | undefined, o) => {
      if (proc) throw new Exit(await processLogs(client(), name, proc, o));
      const ac = new AbortController();
      process.once('SIGINT', () => ac.abort());
      for await (const c of client().logs(name, { follow: !!o.follow, tail: o.tail, signal: ac.signal }))
        process.stdout.write(c);
    });

  program
    .command('mcp')
    .description('serve MCP over stdio for AI agents (docs/mcp.md); talks to the daemon like the other commands')
    .option('--read-only', 'only the tools that read: list, get, read_file, list_dir, stat, list_images, stats')
    .option(
      '--allow-image <id>',
      'images create_vm may use (repeat; default any)',
      (v: string, acc: string[]) => [...acc, v],
      [] as string[],
    )
    .option('--max-vms <n>', 'VMs created through MCP that may exist at once (0: no cap)', Number, 0)
    .option('--allow-egress-changes', "let the MCP client change VMs' egress policies (set_egress)")
    .action(async (o: { readOnly?: boolean; allowImage: string[]; maxVms: number; allowEgressChanges?: boolean }) => {
      // loaded here: the SDK is not every command's start-up cost
      const { serveMcpStdio } = await import('../mcp/mcp-stdio.js');
      await serveMcpStdio(client(), {
        readOnly: !!o.readOnly,
        images: o.allowImage,
        maxVms: o.maxVms,
        egress: !!o.allowEgressChanges,
      });
    });

  egressCommands(program, client);
  processCommands(program, client);
  clusterCommands(program, client);

  program
    .command('completion')
    .argument('<shell>', 'bash or zsh')
    .description('print a shell completion script')
    .action((shell: string) => void process.stdout.write(completionScript(shell)));
  return program;
}

/** Runs the CLI; resolves with the process exit code. Errors are one line on stderr. */
export async function runCli(argv: string[]): Promise<number> {
  const program = buildCli().exitOverride();
  helpHints(program);
  try {
    await program.parseAsync(argv);
    return 0;
  } catch (err) {
    if (err instanceof Exit || err instanceof ProcessExit) return err.code;
    const e = err as { code?: string; exitCode?: number; message?: string };
    if (typeof e.code === 'string' && e.code.startsWith('commander.')) return e.exitCode ?? 2;
    process.stderr.write(`svc: ${e.message ?? String(err)}\n`);
    return err instanceof SvcError ? (err.status === 0 ? 3 : 1) : 1;
  }
}

/** What the daemon says of a call that worked but not as asked (a restore or clone that cold-booted): on stderr, whatever the output's form. */
function warn(out: object): void {
  if ('warning' in out && typeof out.warning === 'string') console.error(`warning: ${out.warning}`);
}
