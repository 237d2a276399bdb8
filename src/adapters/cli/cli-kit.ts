import { InvalidArgumentError, type Command } from 'commander';
import type { CreateProgressEvent, ImageBuildEvent } from '../../domain/events.js';
import type { ProcessStart } from '../../domain/processes.js';
import { ms } from './format.js';

/** What every command file shares: repeatable and whole-number flags, JSON-or-text answers, progress, stdin, exit codes. */

/** Collects a repeatable flag's values (commander's `argParser`). */
export const collect = (v: string, prev: string[]) => [...prev, v];

/** The value as indented JSON with `--json`, else the text `human` makes of it. */
export function print(json: boolean | undefined, value: unknown, human: () => string): void {
  process.stdout.write((json ? JSON.stringify(value, null, 2) : human()) + '\n');
}

export async function readStdin(): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of process.stdin) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

/** Renders create or build progress: one updating line on a terminal, plain lines otherwise. */
export function progress(
  e:
    | Pick<CreateProgressEvent, 'phase' | 'message' | 'elapsed_ms'>
    | Pick<ImageBuildEvent, 'phase' | 'message' | 'elapsed_ms'>,
  tty: boolean,
): void {
  const line = `${e.phase.padEnd(10)} ${e.message} (${ms(e.elapsed_ms)})`;
  if (tty) process.stderr.write(`\r\x1b[2K${line}${e.phase === 'ready' || e.phase === 'error' ? '\n' : ''}`);
  else process.stderr.write(`${line}\n`);
}

/** Thrown to leave with a given exit code (the remote command's, the shell's). */
export class Exit extends Error {
  constructor(readonly code: number) {
    super(`exit ${code}`);
  }
}

/**
 * An error of this host's files as `PATH: what went wrong`, as cp and ls say it; Node's own text
 * (`ENOENT: no such file or directory, stat '/x'`) names the system call. Other errors: their message.
 */
export function errorText(err: unknown): string {
  const e = err as Partial<NodeJS.ErrnoException> | undefined;
  if (typeof e?.code === 'string' && typeof e.syscall === 'string' && typeof e.path === 'string') {
    const what = /^E[A-Z0-9]+: (.+?), [a-z_]+ '/.exec(e.message ?? '')?.[1] ?? e.code;
    return `${e.path}: ${what}`;
  }
  return (err as { message?: string } | undefined)?.message ?? String(err);
}

/** A flag's whole number: commander then says which flag and echoes what was typed. */
export const whole =
  (what: string) =>
  (v: string): number => {
    if (!/^\d+$/.test(v.trim())) throw new InvalidArgumentError(`expected ${what}`);
    return Number(v);
  };

const UNIT_MB: Record<string, number> = { k: 1 / 1024, m: 1, g: 1024, t: 1024 * 1024 };

/**
 * A size flag in `unit` (MB or GB): a whole number in that unit, or with a unit of its own as
 * docker's `-m 1g` and Multipass's `--disk 10G` write it (k, m, g, t; with or without `i` and `b`,
 * any case; binary, as docker reads them), when that is a whole number of `unit`.
 */
export const size =
  (unit: 'MB' | 'GB', example: string) =>
  (v: string): number => {
    const m = /^(\d+(?:\.\d+)?)\s*(?:([kmgt])i?b?)?$/i.exec(v.trim());
    const inUnit =
      m && (m[2] ? (Number(m[1]) * UNIT_MB[m[2].toLowerCase()]) / (unit === 'GB' ? 1024 : 1) : Number(m[1]));
    if (inUnit === null || !Number.isInteger(inUnit))
      throw new InvalidArgumentError(`expected a whole number of ${unit}, such as ${example}`);
    return inUnit;
  };

export const ENV_HELP =
  "an environment variable (repeatable); NAME alone takes this shell's value, off the command line";

/**
 * `-e NAME=VALUE` (repeatable) as a request's env; `-e NAME` takes NAME's value from this shell's
 * environment (docker's rule), so a secret need not be typed where `ps` and history see it. The
 * daemon checks the names.
 */
export function envOption(list: string[], here: NodeJS.ProcessEnv = process.env): Record<string, string> | undefined {
  if (!list.length) return undefined;
  const out: Record<string, string> = {};
  for (const kv of list) {
    const i = kv.indexOf('=');
    if (i === 0) throw new Error(`--env takes NAME=VALUE or NAME, not ${JSON.stringify(kv)}`);
    if (i > 0) out[kv.slice(0, i)] = kv.slice(i + 1);
    else if (here[kv] !== undefined) out[kv] = here[kv]!;
    else throw new Error(`--env ${kv}: ${kv} is not set in this shell (give NAME=VALUE)`);
  }
  return out;
}

/** `--restart always|on-failure[:N]|no` (and `svc new --entrypoint-restart`) (docker's words) as POST /processes's fields; the daemon checks them. */
export function restartOption(v: string): Pick<ProcessStart, 'restart' | 'max_restarts'> {
  const m = /^(no|always|on-failure)(?::(\d{1,7}))?$/.exec(v);
  if (!m || (m[1] === 'no' && m[2])) throw new Error(`--restart must be always, on-failure or on-failure:N (not ${v})`);
  if (m[1] === 'no') return {};
  return { restart: m[1] as 'always' | 'on-failure', ...(m[2] ? { max_restarts: Number(m[2]) } : {}) };
}

/** Does the option `token` names take the next word as its value? (`--opt=v` and `-ov` carry their own.) */
function takesNext(command: Command, token: string): boolean {
  if (token.includes('=') || (!token.startsWith('--') && token.length > 2)) return false;
  const o = command.options.find((x) => x.long === token || x.short === token);
  return !!o && (o.required || o.optional);
}

/**
 * The guest's command line begins at a command's operand `at` (`svc x NAME CMD ARGS...`): a `--`
 * is put before it, so that its flags are the command's (`svc x web ls -la`, as `docker exec`
 * takes them), while svc's own options before it still count (`svc x web --user svc id -u`).
 * argv as node gives it; unchanged when it has a `--` already or no such command.
 */
export function guestCommandLine(program: Command, argv: string[], starts: Record<string, number>): string[] {
  let i = 2;
  while (i < argv.length && argv[i].startsWith('-') && argv[i] !== '--') i += takesNext(program, argv[i]) ? 2 : 1;
  const sub = program.commands.find((c) => c.name() === argv[i] || c.aliases().includes(argv[i]));
  const at = sub && starts[sub.name()];
  if (!sub || at === undefined) return argv;
  let operand = 0;
  for (let j = i + 1; j < argv.length; j++) {
    const t = argv[j];
    if (t === '--') return argv;
    if (t.startsWith('-') && t.length > 1) {
      if (takesNext(sub, t)) j++;
    } else if (operand++ === at) return [...argv.slice(0, j), '--', ...argv.slice(j)];
  }
  return argv;
}
