import { readFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { request } from 'node:http';
import { StringDecoder } from 'node:string_decoder';
import { fileURLToPath } from 'node:url';
import { InvalidArgumentError } from '../../domain/errors.js';
import { noneOn404, SvcError, type SvcClient } from '../client/svc-client.js';

/**
 * svc's code interpreter server in a VM (code-interpreter.py beside this file, on the Python
 * standard library alone): put in the guest, started as a durable process that listens on
 * CODE_INTERPRETER_PORT of the guest's loopback, and driven through the daemon's port stream
 * (`openPort`). E2B's `code-interpreter-v1` template (adapters/e2b) and the MCP server's
 * `run_code` (adapters/mcp) both run cells in it. docs/e2b.md, "Code interpreter".
 */

/** Where the server listens in the guest (E2B's JUPYTER_PORT, which the SDK's `runCode` reaches). */
export const CODE_INTERPRETER_PORT = 49999;
/** The durable process it runs as (its name since E2B's template was its first user). */
export const CODE_INTERPRETER_TAG = 'e2b-code-interpreter';
/** The home its cells start in. */
export const CODE_INTERPRETER_HOME = '/root';

const SOURCE_DIR = fileURLToPath(new URL('../../../../src/adapters/code-interpreter/', import.meta.url));
/** What `npm run build` bundles for the server (scripts/build-code-interpreter.mjs). */
const BUILT_DIR = fileURLToPath(new URL('../../../code-interpreter/', import.meta.url));
const GUEST_DIR = '/usr/local/lib/svc';
/**
 * The server, the JavaScript kernel it starts for a context of language `js` or `ts`, and the
 * TypeScript kernel's type stripper (sucrase, bundled), all in one folder of the guest.
 */
const FILES = [
  join(SOURCE_DIR, 'code-interpreter.py'),
  join(SOURCE_DIR, 'code-interpreter-js.cjs'),
  join(BUILT_DIR, 'code-interpreter-ts.cjs'),
];
const GUEST_SCRIPT = `${GUEST_DIR}/${basename(FILES[0])}`;
const PYTHON = '/usr/bin/python3';
/** The VM's envs, which every cell runs with (the server's `--envs`). */
const GUEST_ENVS = `${GUEST_DIR}/code-interpreter-envs.json`;
/** Written by the server once its default kernel ran a first (empty) cell. */
const GUEST_WARM = '/run/svc-code-interpreter-warm';
/** How long the server has to listen after it starts (python3's start, under TCG too). */
const LISTEN_TIMEOUT_MS = 30_000;

let sources: Promise<Buffer[]> | undefined;
/** The server's files (FILES), read once: E2B names its prepared VM by them, and each start may put them in a guest. */
export function serverSources(): Promise<Buffer[]> {
  sources ??= Promise.all(FILES.map((f) => readFile(f))).catch((err: unknown) => {
    sources = undefined;
    throw err;
  });
  return sources;
}

/** The server's files by the names they have in the guest's folder (a test puts them in one of its own). */
export async function serverFiles(): Promise<{ name: string; data: Buffer }[]> {
  return (await serverSources()).map((data, i) => ({ name: basename(FILES[i]), data }));
}

/**
 * Puts the server in `vm` and starts it, with `envs` for its cells; resolves once it listens.
 * `needs` says what wants it, for the error of a guest without python3. The `preload` modules that
 * the guest has are imported by the kernel's warm-up cell (binding no name), before `waitWarm`.
 */
export async function installServer(
  client: SvcClient,
  vm: string,
  envs: Record<string, string>,
  needs: string,
  preload: readonly string[] = [],
): Promise<void> {
  const python = await client.stat(vm, PYTHON).catch(noneOn404);
  if (!python)
    throw new InvalidArgumentError(`${needs} needs ${PYTHON} in the VM's image (the default debian image has it)`);
  await client.mkdir(vm, GUEST_DIR, { recursive: true });
  for (const { name, data } of await serverFiles())
    await client.upload(vm, { path: `${GUEST_DIR}/${name}`, permissions: '0644' }, data, data.length);
  await writeEnvs(client, vm, envs);
  await client.startProcess(vm, {
    cmd: PYTHON,
    args: [GUEST_SCRIPT, '--port', String(CODE_INTERPRETER_PORT), '--envs', GUEST_ENVS, '--warm', GUEST_WARM].concat(
      preload.length ? ['--preload', preload.join(',')] : [],
    ),
    cwd: CODE_INTERPRETER_HOME,
    tag: CODE_INTERPRETER_TAG,
    restart: 'on-failure',
  });
  await waitListening(client, vm);
}

/**
 * Starts the server in `vm` unless it runs there (its kernel then keeps its state). Of two first
 * callers at once (two /mcp requests, each with a server of its own; two `svc code`), one starts it:
 * the other's start is refused (a running process has its tag), and it waits for that one. `needs`
 * names the caller for the error of a guest without python3.
 */
export async function ensureServer(client: SvcClient, vm: string, needs: string): Promise<void> {
  const now = await client.process(vm, CODE_INTERPRETER_TAG).catch(noneOn404);
  if (now && now.state !== 'ended') return waitListening(client, vm);
  await installServer(client, vm, {}, needs).catch((err: unknown) => {
    if (err instanceof SvcError && err.status === 409) return waitListening(client, vm);
    throw err;
  });
}

/** The envs every cell starts with (and each context's processes). */
export async function writeEnvs(client: SvcClient, vm: string, envs: Record<string, string>): Promise<void> {
  const data = Buffer.from(JSON.stringify(envs));
  await client.upload(vm, { path: GUEST_ENVS, permissions: '0600' }, data, data.length);
}

/**
 * Waits until `ready()`, while the server's process runs: a server that ended, or that has not
 * done `what` in `ms`, fails the wait, saying which.
 */
async function waitServer(
  client: SvcClient,
  vm: string,
  what: string,
  ready: () => Promise<boolean>,
  ms = LISTEN_TIMEOUT_MS,
): Promise<void> {
  for (const until = Date.now() + ms; !(await ready());) {
    const now = await client.process(vm, CODE_INTERPRETER_TAG);
    if (now.state === 'ended' || Date.now() > until)
      throw new Error(
        `svc's code interpreter did not ${what}` +
          (now.state === 'ended' ? ` (it ended: svc logs ${vm} ${CODE_INTERPRETER_TAG})` : ` in ${ms / 1000} s`),
      );
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Resolves once the server listens in `vm`. */
export const waitListening = (client: SvcClient, vm: string) =>
  waitServer(client, vm, `listen on port ${CODE_INTERPRETER_PORT}`, async () => {
    const open = await client.openPort(vm, CODE_INTERPRETER_PORT).catch(noneOn404);
    open?.destroy();
    return !!open;
  });

/**
 * Resolves once its default kernel ran the warm-up cell (the server's --warm file is there), in
 * `ms` at most (a warm-up that imports modules takes longer).
 */
export const waitWarm = (client: SvcClient, vm: string, ms = LISTEN_TIMEOUT_MS) =>
  waitServer(client, vm, 'start its kernel', async () => !!(await client.stat(vm, GUEST_WARM).catch(noneOn404)), ms);

/** What the server answers an execution with, one object a line (E2B's messaging). */
export interface CellEvent {
  type: 'stdout' | 'stderr' | 'result' | 'error' | 'number_of_executions' | 'end_of_execution' | string;
  text?: string;
  name?: string;
  value?: string;
  traceback?: string;
  png?: string;
  jpeg?: string;
  is_main_result?: boolean;
  chart?: { type?: string; title?: string };
}

export interface Cell {
  code: string;
  language?: string;
  context_id?: string;
  env_vars?: Record<string, string>;
}

export interface CellRun {
  events: CellEvent[];
  /** The answer passed `maxBytes` and the rest was not read: the server stops the cell then. */
  cut: boolean;
}

/**
 * Runs `cell` on the server in `vm` and reads its events, each handed to `onEvent` as it comes, at
 * most `maxBytes` of them. A cell whose caller goes away is interrupted by the server (its kernel
 * and state stay): so is one cut, or one that runs past `timeoutS` (the run then fails saying so).
 */
export async function runCell(
  client: SvcClient,
  vm: string,
  cell: Cell,
  o: { maxBytes: number; timeoutS?: number; onEvent?: (e: CellEvent) => void },
): Promise<CellRun> {
  const socket = await client.openPort(vm, CODE_INTERPRETER_PORT);
  const body = Buffer.from(JSON.stringify(cell));
  const signal = o.timeoutS ? AbortSignal.timeout(o.timeoutS * 1000) : undefined;
  const run = new Promise<CellRun>((resolve, reject) => {
    const req = request(
      {
        createConnection: () => socket,
        method: 'POST',
        path: '/execute',
        headers: { 'content-type': 'application/json', 'content-length': body.length },
        signal,
      },
      (res) => {
        const events: CellEvent[] = [];
        let pending = '';
        let size = 0;
        const decoder = new StringDecoder('utf8');
        // a line that is not an event (or an onEvent that throws) ends the run with an error,
        // never throws out of a stream's handler
        const take = (lines: string[]): boolean => {
          try {
            for (const l of lines) {
              if (!l.trim()) continue;
              const e = event(l);
              events.push(e);
              o.onEvent?.(e);
            }
            return true;
          } catch (err) {
            res.destroy();
            reject(err as Error);
            return false;
          }
        };
        res.on('data', (b: Buffer) => {
          size += b.length;
          if (res.statusCode !== 200) return void (pending.length < 500 && (pending += decoder.write(b)));
          if (size > o.maxBytes) {
            res.destroy();
            return void resolve({ events, cut: true });
          }
          const lines = (pending + decoder.write(b)).split('\n');
          pending = lines.pop() ?? '';
          take(lines);
        });
        res.on('end', () => {
          if (res.statusCode !== 200)
            return reject(new InvalidArgumentError(`the code interpreter refused the cell: ${pending.slice(0, 500)}`));
          if (take([pending + decoder.end()])) resolve({ events, cut: false });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
  return run.catch((err: unknown) => {
    throw signal?.aborted ? new Error(`the cell ran past ${o.timeoutS} s and was interrupted`) : err;
  });
}

/** One line of the answer as an event. */
function event(line: string): CellEvent {
  let e: unknown;
  try {
    e = JSON.parse(line);
  } catch {
    e = undefined;
  }
  if (typeof e !== 'object' || e === null || typeof (e as CellEvent).type !== 'string')
    throw new Error(`the code interpreter answered a line that is not one of its events: ${line.slice(0, 200)}`);
  return e as CellEvent;
}
