import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pty from 'node-pty';
import { poll } from './wait.js';

/** The built CLI, run as a user runs it. */
export const SVC = fileURLToPath(new URL('../../src/bin/svc.js', import.meta.url));

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** `svc ARGS` as a subprocess with pipes (no terminal), `input` on its stdin. */
export function runSvc(env: NodeJS.ProcessEnv, args: string[], input?: string): Promise<CliRun> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [SVC, ...args], { env });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (c) => (stdout += c));
    p.stderr.on('data', (c) => (stderr += c));
    p.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    p.stdin.end(input);
  });
}

/** A program in a real pseudo-terminal: what it printed so far, keys to type, its exit. */
export interface Terminal {
  output(): string;
  write(keys: string): void;
  resize(cols: number, rows: number): void;
  /** Waits (up to `ms`) until the output matches, and asserts it does. */
  waitFor(re: RegExp, ms?: number): Promise<void>;
  exit: Promise<number>;
  kill(): void;
}

/** `file ARGS` (node runs it) in a pseudo-terminal of `cols` x `rows`. */
export function inTerminal(
  file: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  size: { cols: number; rows: number } = { cols: 80, rows: 24 },
): Terminal {
  const term = pty.spawn(process.execPath, [file, ...args], { ...size, env: env as Record<string, string> });
  let out = '';
  term.onData((s) => (out += s));
  const exit = new Promise<number>((r) => term.onExit((e) => r(e.exitCode)));
  return {
    output: () => out,
    write: (keys) => term.write(keys),
    resize: (cols, rows) => term.resize(cols, rows),
    waitFor: async (re, ms = 10_000) => {
      await poll(() => re.test(out), { ms, every: 100 });
      expect(out).to.match(re);
    },
    exit,
    kill: () => term.kill(),
  };
}

/** The size a shell's terminal is opened at for `expectShellFollowsResize`. */
export const SHELL_SIZE = { cols: 91, rows: 29 };

/**
 * The shell in `term` (opened at SHELL_SIZE) says its size, is resized to 100x33 and says that:
 * the resize reached the guest's terminal. `settleMs` gives the shell time to start and to take
 * the resize (longer on a real guest).
 */
export async function expectShellFollowsResize(term: Terminal, settleMs: number): Promise<void> {
  await new Promise((r) => setTimeout(r, settleMs));
  term.write('stty size\r');
  await term.waitFor(new RegExp(`${SHELL_SIZE.rows} ${SHELL_SIZE.cols}`));
  term.resize(100, 33);
  await new Promise((r) => setTimeout(r, settleMs / 2));
  term.write('stty size\r');
  await term.waitFor(/33 100/);
}
