import type { Readable } from 'node:stream';
import { Command } from 'commander';
import { isCommandNotFound, type ExecRequest } from '../../domain/agent.js';
import { parseDuration } from '../../domain/duration.js';
import { SvcClient, SvcError } from '../client/svc-client.js';
import { completionScript } from './completion.js';
import { egressCommands } from './egress-commands.js';
import { copy, parseEndpoint } from './copy.js';
import { bytes, ms, sparkline, table } from './format.js';
import { interactiveShell } from './interactive-shell.js';
import { processCommands, processLogs, ProcessExit } from './process-commands.js';
import { codeCommands } from './code-commands.js';
import { clusterCommands } from './cluster-commands.js';
import { snapshotCommands } from './snapshot-commands.js';
import { collect, envOption, ENV_HELP, errorText, Exit, guestCommandLine, print, whole } from './cli-kit.js';
import { vmCommands } from './vm-commands.js';
import { forwardCommands, guestFileCommands, secretCommands } from './guest-commands.js';
import { imageCommands } from './image-commands.js';
import { printConsole } from './console-logs.js';
import { sshCommands } from './ssh-commands.js';

/**
 * Every command's usage error ends with one line that names its own help, never the whole help
 * (commander's default with showHelpAfterError()).
 */
function helpHints(cmd: Command, path: string[] = []): void {
  const here = [...path, ...(cmd.parent ? [cmd.name()] : [])];
  cmd.showHelpAfterError(`(see: svc${here.length ? ` ${here.join(' ')}` : ''} --help)`);
  for (const sub of cmd.commands) helpHints(sub, here);
}

/** `svc sh` with piped input and no --shell: the agent's own choice for a terminal, in HOME (unless --cwd). */
const PIPED_SHELL = 'for s in "$SHELL" /bin/bash /bin/sh; do [ -n "$s" ] && [ -x "$s" ] && exec "$s"; done; exit 127';
const IN_HOME = 'cd "${HOME:-/}" 2>/dev/null; ';

/** An exec streamed to this terminal: stdout and stderr as they come; its exit code (-1: timed out). */
async function streamExec(client: SvcClient, name: string, req: ExecRequest, stdin?: Readable): Promise<number> {
  let code = 0;
  for await (const f of client.execStream(name, req, stdin)) {
    if (f.type === 'stdout') process.stdout.write(f.data ?? '');
    else if (f.type === 'stderr') process.stderr.write(f.data ?? '');
    else if (f.type === 'error') process.stderr.write(`svc: ${f.error}\n`);
    else if (f.type === 'exit') code = f.exit_code ?? 1;
  }
  return code;
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

  vmCommands(program, client);
  imageCommands(program, client);

  program
    .command('x')
    .alias('exec')
    .argument('<name>')
    .argument('<cmd>')
    .argument('[args...]')
    .description('run a command in a VM: svc x NAME -- CMD ARGS...')
    .option('-w, --cwd <dir>', "start there (an absolute path; docker exec's -w), not in the user's home")
    .option(
      '-u, --user <user>',
      'a user of the guest by name or number: its ids, HOME, USER, SHELL, and its home as the cwd',
    )
    .option('--uid <n>', "user id (its passwd user's gid, HOME and USER follow it)", whole('a numeric user id'))
    .option('--gid <n>', 'group id', whole('a numeric group id'))
    .option('--timeout <duration>', 'kill it after this long (30s, 5m): exit 124, as timeout(1)')
    .option('-e, --env <NAME=VALUE>', ENV_HELP, collect, [])
    .option('-t, --tty', 'in a terminal even when this one is not (as ssh -t); default: when input and output are one')
    .option('-T, --no-tty', 'never in a terminal: stdout and stderr apart, stdin as it is')
    .action(async (name: string, cmd: string, args: string[], o) => {
      const env = envOption(o.env);
      const plain = o.timeout !== undefined || o.uid !== undefined || o.gid !== undefined;
      if (o.tty && plain) throw new Error('-t takes no --timeout, --uid or --gid (a terminal runs as --user)');
      // As ssh, multipass and limactl do: a person at a terminal gets the command in one (python3's
      // prompt, top, vim), its output and its code; a script, a pipe or -T gets stdout and stderr apart.
      if (o.tty ?? (!plain && !!process.stdin.isTTY && !!process.stdout.isTTY)) {
        const term = { cmd, args, cwd: o.cwd, user: o.user, env };
        const code = await interactiveShell(client(), name, term).catch((err: unknown) => {
          if (!(err instanceof SvcError)) throw err;
          // an agent from before a command in a terminal: without -t, run it as before
          if (o.tty === undefined && err.status === 501) return undefined;
          // a command the guest does not have exits 127, as an exec of it (and a shell) says
          if (err.status === 404 && isCommandNotFound(err.message)) {
            process.stderr.write(`svc: ${err.message}\n`);
            return 127;
          }
          throw err;
        });
        if (code !== undefined) throw new Exit(code);
      }
      const code = await streamExec(
        client(),
        name,
        {
          cmd,
          args,
          cwd: o.cwd,
          user: o.user,
          uid: o.uid,
          gid: o.gid,
          timeoutMs: o.timeout ? parseDuration(o.timeout, 'timeout') : undefined,
          env,
        },
        process.stdin.isTTY ? undefined : process.stdin,
      );
      if (code < 0) {
        // --timeout as typed: 30s, 5m, or whole seconds (said with their unit)
        const within = /^\d+$/.test(o.timeout ?? '') ? `${o.timeout} s` : (o.timeout ?? 'its timeout');
        process.stderr.write(`svc: ${cmd} did not end within ${within}; it was killed (exit 124)\n`);
        throw new Exit(124);
      }
      throw new Exit(code);
    });

  program
    .command('sh')
    .argument('<name>')
    .option('--shell <path>')
    .option('-u, --user <user>', "a user of the guest to log in as (such as svc, the debian image's); default root")
    .option('-t, --tty', 'a terminal even when the input is not one (as ssh -tt): prompts and echo included')
    .option('-w, --cwd <dir>', "start there (an absolute path), not in the user's home")
    .option('-e, --env <NAME=VALUE>', ENV_HELP, collect, [])
    .description('open an interactive shell in a VM; with piped input, run it as a script (no terminal)')
    .action(async (name: string, o) => {
      const where = { cwd: o.cwd, env: envOption(o.env) };
      if (process.stdin.isTTY || o.tty)
        throw new Exit(await interactiveShell(client(), name, { shell: o.shell, user: o.user, ...where }));
      // Input that is not a terminal is a script, as `ssh host < script` takes it: the shell the
      // terminal would get reads it with no terminal, so the output is the script's own (no
      // prompt, no echo, stderr apart) and the exit code the shell's. That shell: --shell, else
      // SHELL (with --user, that user's login shell from the guest's passwd), /bin/bash, /bin/sh.
      const script = o.shell
        ? { cmd: o.shell, args: [] }
        : { cmd: '/bin/sh', args: ['-c', (o.cwd ? '' : IN_HOME) + PIPED_SHELL] };
      throw new Exit(await streamExec(client(), name, { ...script, user: o.user, ...where }, process.stdin));
    });

  program
    .command('cp')
    .argument('<src>')
    .argument('<dst>')
    .description(
      'copy files: NAME:/path on one side; directories go as tar; - for the other side is a tar archive on stdin or stdout (as docker cp)',
    )
    .option(
      '-u, --user <user>',
      "the guest's side as this user: what is written there is theirs (else root's), NAME:path is in their home",
    )
    .action(async (src: string, dst: string, o) =>
      copy(client(), parseEndpoint(src), parseEndpoint(dst), !!process.stderr.isTTY, o.user),
    );

  guestFileCommands(program, client);
  forwardCommands(program, client);
  sshCommands(program, client, () => {
    // as the client finds the daemon: a flag, else the environment (a ProxyCommand in ~/.ssh/config has neither)
    const o = program.opts<{ socket?: string; api?: string; config?: string }>();
    const env = process.env;
    return {
      socket: o.socket ?? env.SVC_SOCKET,
      api: o.api ?? env.SVC_API,
      config: o.config ?? env.SVC_CONFIG,
    };
  });
  secretCommands(program, client);

  program
    .command('stats')
    .argument('<name>')
    .option('--json')
    .description("a VM's uptime, load, CPUs, memory and disk now, from its agent")
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
    .option('--limit <n>', 'entries', whole('a whole number of entries'), 20)
    .option('--json')
    .description("the daemon's latest operations: what was done to which VM, how it ended and how long it took")
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
    .description('the daemon: its version, API version, hypervisor, and where this command reached it')
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
    .option('--tail <bytes>', "the console log's last N bytes", whole('a whole number of bytes'))
    .option('--from <offset>', 'from this byte (a process: N, or stdout:N,stderr:M)')
    .option(
      '-n, --lines <n>',
      "the last N lines (a process's output: of each stream; 0: only what comes next)",
      whole('a whole number of lines'),
    )
    .description("the guest serial console log, or a durable process's output")
    .action(async (name: string, proc: string | undefined, o) => {
      if (proc) {
        if (o.tail !== undefined)
          throw new Error("--tail counts the console log's bytes; a process's output takes -n LINES");
        if (o.lines !== undefined && o.from !== undefined) throw new Error('give --from or -n, not both');
        throw new Exit(await processLogs(client(), name, proc, o));
      }
      if ([o.lines, o.tail, o.from].filter((v) => v !== undefined).length > 1)
        throw new Error('give one of --tail, -n and --from');
      if (o.from !== undefined && !/^\d+$/.test(o.from))
        throw new Error(`--from ${o.from}: the console log takes a byte; streams are a process's (svc logs NAME ID)`);
      const ac = new AbortController();
      process.once('SIGINT', () => ac.abort());
      await printConsole(client(), name, { ...o, from: o.from === undefined ? undefined : Number(o.from) }, ac.signal);
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
    .option(
      '--max-vms <n>',
      'VMs created through MCP that may exist at once (0: no cap)',
      whole('a whole number of VMs'),
      0,
    )
    .option('--allow-egress-changes', "let the MCP client change VMs' egress policies (set_egress)")
    .option('--allow-node-changes', 'on a node of a cluster: let the MCP client drain nodes (drain_node, undrain_node)')
    .action(
      async (o: {
        readOnly?: boolean;
        allowImage: string[];
        maxVms: number;
        allowEgressChanges?: boolean;
        allowNodeChanges?: boolean;
      }) => {
        // loaded here: the SDK is not every command's start-up cost
        const { serveMcpStdio } = await import('../mcp/mcp-stdio.js');
        await serveMcpStdio(client(), {
          readOnly: !!o.readOnly,
          images: o.allowImage,
          maxVms: o.maxVms,
          egress: !!o.allowEgressChanges,
          nodes: !!o.allowNodeChanges,
        });
      },
    );

  egressCommands(program, client);
  processCommands(program, client);
  codeCommands(program, client);
  clusterCommands(program, client);
  snapshotCommands(program, client);

  program
    .command('completion')
    .argument('<shell>', 'bash or zsh')
    .description('print a shell completion script')
    .action((shell: string) => void process.stdout.write(completionScript(shell, program)));
  return program;
}

/** Runs the CLI; resolves with the process exit code. Errors are one line on stderr. */
export async function runCli(argv: string[]): Promise<number> {
  const program = buildCli().exitOverride();
  helpHints(program);
  try {
    // svc x NAME CMD ARGS..., svc run NAME CMD ARGS..., svc ssh NAME CMD...: the command's flags are its own
    await program.parseAsync(guestCommandLine(program, argv, { x: 1, run: 1, ssh: 1 }));
    return 0;
  } catch (err) {
    if (err instanceof Exit || err instanceof ProcessExit) return err.code;
    const e = err as { code?: string; exitCode?: number; message?: string };
    if (typeof e.code === 'string' && e.code.startsWith('commander.')) return e.exitCode ?? 2;
    process.stderr.write(`svc: ${errorText(err)}\n`);
    return err instanceof SvcError ? (err.status === 0 ? 3 : 1) : 1;
  }
}
