import { InvalidArgumentError } from 'commander';
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

/** A flag's whole number: commander then says which flag and echoes what was typed. */
export const whole =
  (what: string) =>
  (v: string): number => {
    if (!/^\d+$/.test(v.trim())) throw new InvalidArgumentError(`expected ${what}`);
    return Number(v);
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
