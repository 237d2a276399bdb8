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

/** `--restart always|on-failure[:N]|no` (and `svc new --entrypoint-restart`) (docker's words) as POST /processes's fields; the daemon checks them. */
export function restartOption(v: string): Pick<ProcessStart, 'restart' | 'max_restarts'> {
  const m = /^(no|always|on-failure)(?::(\d{1,7}))?$/.exec(v);
  if (!m || (m[1] === 'no' && m[2])) throw new Error(`--restart must be always, on-failure or on-failure:N (not ${v})`);
  if (m[1] === 'no') return {};
  return { restart: m[1] as 'always' | 'on-failure', ...(m[2] ? { max_restarts: Number(m[2]) } : {}) };
}
