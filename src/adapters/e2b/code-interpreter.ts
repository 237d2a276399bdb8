import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { InvalidArgumentError } from '../../domain/errors.js';
import { noneOn404, type SvcClient } from '../client/svc-client.js';
import type { Instance } from '../../domain/vm.js';
import { E2B_HOME, metaOf } from './sandboxes.js';

/** The template `@e2b/code-interpreter`'s `Sandbox.create()` asks for when given none. */
export const CODE_INTERPRETER_TEMPLATE = 'code-interpreter-v1';
/** Where the SDK's `runCode` and code contexts reach it in the sandbox (its JUPYTER_PORT). */
export const CODE_INTERPRETER_PORT = 49999;
/** The durable process it runs as. */
export const CODE_INTERPRETER_TAG = 'e2b-code-interpreter';

const SCRIPT = fileURLToPath(new URL('../../../../src/adapters/e2b/code-interpreter.py', import.meta.url));
const GUEST_DIR = '/usr/local/lib/svc';
const GUEST_SCRIPT = `${GUEST_DIR}/code-interpreter.py`;
const PYTHON = '/usr/bin/python3';
/** How long the server has to listen after it starts (python3's start, under TCG too). */
const LISTEN_TIMEOUT_MS = 30_000;

/**
 * Makes a new sandbox a code interpreter: puts svc's server (code-interpreter.py beside this file, the
 * Python standard library alone) in the guest and starts it as a durable process that listens on
 * CODE_INTERPRETER_PORT, as E2B's `code-interpreter-v1` template runs its Jupyter server. A
 * durable process goes on across pauses, forks and snapshots with the sandbox. The guest needs
 * python3 (the default debian image has it). docs/e2b.md, "Code interpreter".
 */
export async function startCodeInterpreter(client: SvcClient, sandbox: Instance): Promise<void> {
  const vm = sandbox.name;
  const python = await client.stat(vm, PYTHON).catch(noneOn404);
  if (!python)
    throw new InvalidArgumentError(
      `the ${CODE_INTERPRETER_TEMPLATE} template needs ${PYTHON} in the sandbox's image (the default debian image has it)`,
    );
  const script = await readFile(SCRIPT);
  await client.mkdir(vm, GUEST_DIR, { recursive: true });
  await client.upload(vm, { path: GUEST_SCRIPT, permissions: '0644' }, script, script.length);
  const p = await client.startProcess(vm, {
    cmd: PYTHON,
    args: [GUEST_SCRIPT, '--port', String(CODE_INTERPRETER_PORT)],
    cwd: E2B_HOME,
    // the sandbox's envs, as its commands get them: each context and cell starts with them
    env: metaOf(sandbox).envs,
    tag: CODE_INTERPRETER_TAG,
    restart: 'on-failure',
  });
  for (const until = Date.now() + LISTEN_TIMEOUT_MS; ;) {
    const open = await client.openPort(vm, CODE_INTERPRETER_PORT).catch(noneOn404);
    if (open) return void open.destroy();
    const now = await client.process(vm, p.id);
    if (now.state === 'ended' || Date.now() > until)
      throw new Error(
        `svc's code interpreter did not listen on port ${CODE_INTERPRETER_PORT}` +
          (now.state === 'ended'
            ? ` (it ended: svc logs ${vm} ${CODE_INTERPRETER_TAG})`
            : ` in ${LISTEN_TIMEOUT_MS / 1000} s`),
      );
    await new Promise((r) => setTimeout(r, 200));
  }
}
