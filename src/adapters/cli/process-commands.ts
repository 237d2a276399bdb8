import type { Command } from 'commander';
import { processState, type OutputFrame, type ProcessStart, type ProcessStream } from '../../domain/processes.js';
import type { WatchEvent } from '../../domain/watches.js';
import { formatFrom } from '../../domain/timeline.js';
import type { SvcClient } from '../client/svc-client.js';
import { collect, envOption, ENV_HELP, print, restartOption } from './cli-kit.js';
import { table } from './format.js';

/** Ctrl-]: leaves `svc attach` (the process runs on). */
const DETACH = 0x1d;

/** Thrown to leave with a given exit code; cli.ts turns it into the exit status. */
export class ProcessExit extends Error {
  constructor(readonly code: number) {
    super(`exit ${code}`);
  }
}

/** `--from`: a byte offset, or stream:offset,... */
function from(v?: string): number | Partial<Record<ProcessStream, number>> | undefined {
  if (v === undefined) return undefined;
  if (/^\d+$/.test(v)) return Number(v);
  const out: Partial<Record<ProcessStream, number>> = {};
  for (const part of v.split(',')) {
    const [s, n] = part.split(':');
    if (!['stdout', 'stderr', 'pty'].includes(s) || !/^\d+$/.test(n ?? ''))
      throw new Error('--from takes N or stdout:N,stderr:M');
    out[s as ProcessStream] = Number(n);
  }
  return out;
}

/** Writes a frame's bytes where they belong: stderr's to stderr, the rest to stdout. */
function writeFrame(f: OutputFrame): void {
  if ('stream' in f) {
    const bytes = f.encoding === 'base64' ? Buffer.from(f.data, 'base64') : Buffer.from(f.data);
    (f.stream === 'stderr' ? process.stderr : process.stdout).write(bytes);
  } else if ('truncated' in f) {
    process.stderr.write(`svc: ${f.truncated.stream} before byte ${f.truncated.before} is no longer kept\n`);
  } else if ('reverted' in f) {
    process.stderr.write(
      `svc: the vm was reverted to a snapshot; its output from ${formatFrom(f.reverted.from)} on is the reverted guest's\n`,
    );
  }
}

const exitCode = (f: OutputFrame) => ('reason' in f ? (f.exit_code ?? 1) : 0);

/**
 * `svc run`, `ps`, `logs NAME ID`, `attach`, `kill`, `watch`: durable processes and watches
 * (docs/processes.md). `svc logs NAME` without an id stays the console log (cli.ts).
 */
export function processCommands(program: Command, client: () => SvcClient): void {
  program
    .command('run')
    .argument('<name>')
    .argument('<cmd>')
    .argument('[args...]')
    .description('start a process that outlives this command: svc run [--detach] NAME -- CMD ARGS...')
    .option('-d, --detach', 'print its id and leave it running')
    .option('--tag <tag>', 'a name to find it by (one running process per tag)')
    .option('-w, --cwd <dir>', "start there (an absolute path), not in the user's home")
    .option('-u, --user <user>', 'a user of the guest by name or number (default root)')
    .option('-e, --env <NAME=VALUE>', ENV_HELP, collect, [])
    .option('-t, --tty', 'give it a terminal the size of this one')
    .option('-i, --interactive', 'keep its input open (this command passes its own stdin on)')
    .option('--restart <policy>', 'start it again when it ends: always, on-failure, or on-failure:N (N times at most)')
    .action(async (name: string, cmd: string, args: string[], o) => {
      const c = client();
      const req: ProcessStart = { cmd, args, cwd: o.cwd, user: o.user, tag: o.tag, env: envOption(o.env) };
      if (o.restart) Object.assign(req, restartOption(o.restart as string));
      if (o.tty) req.pty = { cols: process.stdout.columns || 80, rows: process.stdout.rows || 24 };
      if (o.interactive) req.stdin = true;
      const p = await c.startProcess(name, req);
      if (o.detach) {
        process.stdout.write(`${p.id}\n`);
        return;
      }
      if (o.interactive && !process.stdin.isTTY) void c.sendStdin(name, p.id, process.stdin, { eof: true });
      const ac = new AbortController();
      const leave = () => {
        ac.abort();
        process.stderr.write(`\nsvc: ${p.id} runs on; svc logs -f ${name} ${p.id}\n`);
      };
      process.once('SIGINT', leave);
      let code = 0;
      for await (const f of c.processOutput(name, p.id, { signal: ac.signal })) {
        writeFrame(f);
        if ('reason' in f) code = exitCode(f);
      }
      process.off('SIGINT', leave);
      throw new ProcessExit(ac.signal.aborted ? 0 : code);
    });

  program
    .command('ps')
    .argument('<name>')
    .option('--json')
    .description("a VM's durable processes: running, and those that ended lately")
    .action(async (name: string, o) => {
      const list = await client().processes(name);
      print(o.json, list, () =>
        table(
          list.map((p) => [
            p.id,
            p.tag ?? '-',
            p.pid,
            processState(p),
            p.started_at,
            [p.cmd, ...p.args].join(' ').slice(0, 60),
          ]),
          ['ID', 'TAG', 'PID', 'STATE', 'STARTED', 'COMMAND'],
        ),
      );
    });

  program
    .command('attach')
    .argument('<name>')
    .argument('<id>', 'process id or tag')
    .description("a running process's terminal: its output as it comes, this terminal's keys to it (Ctrl-] leaves)")
    .action(async (name: string, ref: string) => {
      const c = client();
      const p = await c.process(name, ref);
      const ac = new AbortController();
      const input = process.stdin;
      const raw = input.isTTY && p.pty;
      if (raw) input.setRawMode(true);
      const onInput = (d: Buffer) => {
        if (d.includes(DETACH)) return ac.abort();
        if (p.stdin) void c.sendStdin(name, p.id, d).catch(() => undefined);
      };
      input.on('data', onInput);
      input.resume();
      const onResize = () =>
        void c
          .resizeProcess(name, p.id, process.stdout.columns || 80, process.stdout.rows || 24)
          .catch(() => undefined);
      if (p.pty) {
        process.on('SIGWINCH', onResize);
        onResize();
      }
      let code = 0;
      try {
        // From where its output was when attach began, before any key was sent (what answers the
        // first keys is shown however fast it comes); what it printed before is `svc logs`'s.
        for await (const f of c.processOutput(name, p.id, { from: p.bytes, timeline: p.timeline, signal: ac.signal })) {
          writeFrame(f);
          if ('reason' in f) code = exitCode(f);
        }
      } finally {
        process.off('SIGWINCH', onResize);
        input.off('data', onInput);
        if (raw) input.setRawMode(false);
        input.pause();
      }
      if (ac.signal.aborted) process.stderr.write(`\nsvc: left ${p.id} running\n`);
      throw new ProcessExit(ac.signal.aborted ? 0 : code);
    });

  program
    .command('kill')
    .argument('<name>')
    .argument('<id>', 'process id or tag')
    .option('-s, --signal <signal>', 'the signal to send', 'SIGTERM')
    .option('--forget', 'kill it outright (SIGKILL) and forget it, output and all')
    .description('signal a durable process')
    .action(async (name: string, ref: string, o) => {
      const c = client();
      if (o.forget) process.stdout.write(`${(await c.removeProcess(name, ref)).message}\n`);
      else await c.signalProcess(name, ref, o.signal);
    });

  program
    .command('watch')
    .argument('<name>')
    .argument('[path]', 'what to watch in the guest (a file or a directory)')
    .option('-r, --recursive', 'the whole tree under a directory')
    .option('--from <cursor>', 'resume a watch after this cursor (w3:1200)')
    .option('--json', 'one JSON event a line, with its cursor')
    .description('file changes in a VM as they happen; resumable from any cursor')
    .action(async (name: string, path: string | undefined, o) => {
      if (!path && !o.from) throw new Error('give a path to watch, or --from CURSOR');
      const ac = new AbortController();
      process.once('SIGINT', () => ac.abort());
      const target = o.from ? { from: o.from as string } : { path: path!, recursive: !!o.recursive };
      for await (const e of client().watch(name, target, { signal: ac.signal })) {
        process.stdout.write(o.json ? `${JSON.stringify(e)}\n` : `${watchLine(e)}\n`);
      }
    });
}

function watchLine(e: WatchEvent): string {
  if (e.type === 'watching')
    return `watching ${e.path}${e.recursive ? ' (recursive)' : ''} as ${e.watch}; resume with --from ${e.cursor}`;
  if (e.type === 'overflow') return `overflow: events were dropped (${e.cursor})`;
  if (e.type === 'reverted')
    return `reverted: the VM went back to a snapshot; the events from here are its guest's (${e.cursor})`;
  return `${e.type.padEnd(6)} ${e.path}${e.to ? ` -> ${e.to}` : ''}`;
}

/** `svc logs NAME ID`: a process's output, followed with -f, from --from or its last -n lines. */
export async function processLogs(
  c: SvcClient,
  name: string,
  ref: string,
  o: { follow?: boolean; from?: string; lines?: number },
): Promise<number> {
  const ac = new AbortController();
  process.once('SIGINT', () => ac.abort());
  let code = 0;
  const start = { from: from(o.from), tail: o.lines };
  for await (const f of c.processOutput(name, ref, { ...start, follow: !!o.follow, signal: ac.signal })) {
    writeFrame(f);
    if ('reason' in f) code = exitCode(f);
  }
  return code;
}
