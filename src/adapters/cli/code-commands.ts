import { Option, type Command } from 'commander';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { SvcClient } from '../client/svc-client.js';
import { ensureServer, runCell, type CellEvent } from '../code-interpreter/guest-server.js';
import { collect, envOption, ENV_HELP, readStdin, whole } from './cli-kit.js';
import { ProcessExit } from './process-commands.js';

/** What `svc code` reads of an answer at most (figures included). */
const READ_BYTES = 256 * 1024 * 1024;

interface CodeOptions {
  code?: string;
  bash?: boolean;
  js?: boolean;
  ts?: boolean;
  env: string[];
  figures?: string;
  timeout?: number;
  json?: boolean;
}

/**
 * Makes `dir` unless it is there; resolves with the highest N of its `figure-N.png` files (0 for
 * none), so that the figures of one run go after those of the runs before it, as a notebook's do.
 */
export async function lastFigure(dir: string): Promise<number> {
  await mkdir(dir, { recursive: true });
  let last = 0;
  for (const name of await readdir(dir)) {
    const n = /^figure-([1-9]\d{0,8})\.png$/.exec(name)?.[1];
    if (n) last = Math.max(last, Number(n));
  }
  return last;
}

/** A cell file's language by its name's ending, where it says one. */
const LANGUAGE_OF_FILE: [RegExp, string][] = [
  [/\.(m|c)?js$/, 'js'],
  [/\.(m|c)?ts$/, 'ts'],
  [/\.(ba)?sh$/, 'bash'],
  [/\.py$/, 'python'],
];

/**
 * The language `svc code` asks for: its flag's, else the cell file's by its ending
 * (`analysis.ts` is TypeScript), else none (the server's default, Python).
 */
export function cellLanguage(o: Pick<CodeOptions, 'bash' | 'js' | 'ts'>, file?: string): string | undefined {
  if (o.bash) return 'bash';
  if (o.js) return 'js';
  if (o.ts) return 'ts';
  if (!file || file === '-') return undefined;
  return LANGUAGE_OF_FILE.find(([ending]) => ending.test(file))?.[1];
}

/**
 * `svc code NAME [FILE]`: a cell of Python (or JavaScript, TypeScript, or bash) in the VM's code interpreter, the server
 * MCP's `run_code` and E2B's code interpreter template use (docs/cli.md): its kernel keeps its
 * state from one run to the next, what the cell prints comes as it prints it.
 */
export function codeCommands(program: Command, client: () => SvcClient): void {
  program
    .command('code')
    .argument('<name>')
    .argument(
      '[file]',
      "the cell's code (- or none: stdin); its ending picks the language unless a flag does (.js, .ts, .sh)",
    )
    .description(
      "run a cell of Python in the VM's code interpreter, a kernel that keeps its variables between runs (started at the first): what it prints, its value, its error (exit status 1); figures with --figures",
    )
    .option('-c, --code <code>', "the cell's code")
    .option('--bash', 'run the cell with bash (no state kept)')
    .addOption(
      new Option('--js', 'run the cell as JavaScript, in a node kernel that keeps its state').conflicts('bash'),
    )
    .addOption(
      new Option(
        '--ts',
        'run the cell as TypeScript (its types stripped, not checked) in a node kernel of its own',
      ).conflicts(['bash', 'js']),
    )
    .option('-e, --env <NAME=VALUE>', `${ENV_HELP}, for this cell only`, collect, [])
    .option('--figures <dir>', 'save the PNG of each figure shown in DIR (figure-1.png, ..., after those there)')
    .option(
      '--timeout <seconds>',
      'interrupt the cell after this long (the kernel stays)',
      whole('a number of seconds'),
    )
    .option('--json', 'print its events, one JSON object a line (E2B code interpreter messages)')
    .action(async (name: string, file: string | undefined, o: CodeOptions) => {
      const code = await cellCode(o.code, file);
      const env = envOption(o.env);
      const svc = client();
      await ensureServer(svc, name, 'svc code');
      let figures = o.figures ? await lastFigure(o.figures) : 0;
      let failed = false;
      const show = async (e: CellEvent): Promise<void> => {
        if (e.type === 'error') failed = true;
        if (o.json) return void process.stdout.write(`${JSON.stringify(e)}\n`);
        if (e.type === 'stdout') process.stdout.write(e.text ?? '');
        else if (e.type === 'stderr') process.stderr.write(e.text ?? '');
        else if (e.type === 'result' && e.png && o.figures) {
          const saved = join(o.figures, `figure-${++figures}.png`);
          await writeFile(saved, Buffer.from(e.png, 'base64'));
          process.stderr.write(`svc: ${e.text ?? 'a figure'} saved as ${saved}\n`);
        } else if (e.type === 'result' && e.text !== undefined) process.stdout.write(`${e.text}\n`);
        else if (e.type === 'error') process.stderr.write(`${e.traceback || `${e.name}: ${e.value}`}\n`);
      };
      // events are shown in order, a figure's file written before what comes after it
      let shown = Promise.resolve();
      const run = await runCell(
        svc,
        name,
        { code, language: cellLanguage(o, file), env_vars: env },
        {
          maxBytes: READ_BYTES,
          timeoutS: o.timeout,
          onEvent: (e) => {
            shown = shown.then(() => show(e));
            shown.catch(() => undefined); // awaited below; never an unhandled rejection meanwhile
          },
        },
      );
      await shown;
      if (run.cut)
        throw new Error(
          `the cell's output passed ${READ_BYTES >> 20} MiB: the rest was not read and the cell was stopped`,
        );
      if (failed) throw new ProcessExit(1);
    });
}

/** The cell: `-c`, else the file, else stdin (`-` or no file). */
async function cellCode(code: string | undefined, file: string | undefined): Promise<string> {
  if (code !== undefined && file !== undefined) throw new Error('give the cell with -c or as a file, not both');
  if (code !== undefined) return code;
  if (file !== undefined && file !== '-') return readFile(file, 'utf8');
  if (process.stdin.isTTY) throw new Error('give the cell with -c CODE, a FILE, or on stdin');
  return (await readStdin()).toString('utf8');
}
