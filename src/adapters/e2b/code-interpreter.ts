import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { errorMessage, InvalidArgumentError } from '../../domain/errors.js';
import type { Logger } from '../../ports/logger.js';
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

let script: Promise<Buffer> | undefined;
/** The server's source, read once: each create names the prepared VM by it and may put it in a guest. */
function serverScript(): Promise<Buffer> {
  script ??= readFile(SCRIPT).catch((err: unknown) => {
    script = undefined;
    throw err;
  });
  return script;
}

/** What a create clones once it is ready: a suspended VM with the server running (`e2b-code-interpreter-<hash>`). */
export const CODE_INTERPRETER_VM_PREFIX = 'e2b-code-interpreter-';
/** The sandbox's envs, which every cell runs with (the server's `--envs`): written at each create. */
const GUEST_ENVS = `${GUEST_DIR}/code-interpreter-envs.json`;
/** Written by the server once its default kernel ran a first (empty) cell. */
const GUEST_WARM = '/run/svc-code-interpreter-warm';
/** After a prepared VM failed to be made, the next try waits this long. */
const RETRY_AFTER_MS = 10 * 60_000;

/** The svc create of a sandbox of the template: a clone of the prepared VM, or a create of the default image. */
export interface CodeInterpreterSource {
  create: { from?: string };
  cloned: boolean;
}

/**
 * E2B's `code-interpreter-v1` template on svc (docs/e2b.md, "Code interpreter"): a sandbox of the
 * default image running svc's server (code-interpreter.py beside this file, the Python standard
 * library alone) as a durable process that listens on CODE_INTERPRETER_PORT, as E2B's template runs
 * its Jupyter server. The first create boots the image and starts the server in it (python3 and
 * the server's first kernel take seconds under TCG); after it, a VM of the same is made and
 * suspended with the server and its kernel running, and later creates clone it: the clone wakes
 * with both running. The prepared VM is named by a hash of the server and the default image's
 * build, so a new svc or a rebuilt image makes it again (and the older one goes). Each sandbox's
 * envs go in a file the server reads before every cell, so a clone's cells have its own.
 */
export class CodeInterpreters {
  private making: Promise<void> | undefined;
  private failedAt = 0;

  constructor(
    private readonly client: SvcClient,
    private readonly log?: Logger,
  ) {}

  /** The name the prepared VM has for the server and default image of now. */
  private async preparedName(): Promise<string> {
    const image = await this.client.getImage('default');
    const h = createHash('sha256')
      .update(await serverScript())
      .update(JSON.stringify([image.id, image.revision ?? '']))
      .digest('hex');
    return `${CODE_INTERPRETER_VM_PREFIX}${h.slice(0, 12)}`;
  }

  /** What a create of the template starts from among the VMs `all`. */
  async source(all: Instance[]): Promise<CodeInterpreterSource> {
    // a default image not built yet (the create builds it) has no prepared VM either
    const name = await this.preparedName().catch(() => undefined);
    return name && all.some((vm) => vm.name === name && vm.status === 'suspended')
      ? { create: { from: name }, cloned: true }
      : { create: {}, cloned: false };
  }

  /**
   * Makes the new `sandbox` a code interpreter: a clone's server runs already and is given the
   * sandbox's envs; otherwise the server is put in and started (and a prepared VM is made for the
   * creates after it, in the background).
   */
  async start(sandbox: Instance, cloned: boolean): Promise<void> {
    const envs = metaOf(sandbox).envs;
    if (cloned) {
      await writeEnvs(this.client, sandbox.name, envs);
      return waitListening(this.client, sandbox.name);
    }
    await install(this.client, sandbox.name, envs);
    void this.prepare();
  }

  /** Makes the prepared VM unless it is there, being made, or failed lately. Never rejects. */
  prepare(): Promise<void> {
    if (this.making || Date.now() - this.failedAt < RETRY_AFTER_MS) return this.making ?? Promise.resolve();
    this.making = this.makePrepared()
      .catch((err: unknown) => {
        this.failedAt = Date.now();
        this.log?.warn(
          { err: errorMessage(err) },
          `the code interpreter's prepared VM could not be made; creates start the server themselves, and it is tried again in ${RETRY_AFTER_MS / 60_000} min`,
        );
      })
      .finally(() => (this.making = undefined));
    return this.making;
  }

  private async makePrepared(): Promise<void> {
    const name = await this.preparedName();
    const all = await this.client.list();
    const had = all.find((vm) => vm.name === name);
    // one a stop cut off while it was made runs still: made again
    if (had?.status !== 'suspended') {
      if (had) await this.client.delete(name);
      await this.client.create({ name, persistent: true }, { wait: 'agent' });
      try {
        await install(this.client, name, {});
        // its clones find the kernel started and warm, not starting
        await waitWarm(this.client, name);
        await this.client.suspend(name);
      } catch (err) {
        await this.client.delete(name).catch(() => undefined);
        throw err;
      }
      this.log?.info({ vm: name }, "the code interpreter's prepared VM is made: creates clone it");
    }
    // what older servers or images made is never cloned again (clones of it keep their disks)
    for (const vm of all)
      if (vm.name.startsWith(CODE_INTERPRETER_VM_PREFIX) && vm.name !== name)
        await this.client.delete(vm.name).catch(() => undefined);
  }
}

/** Puts the server in `vm` and starts it, with `envs` for its cells; resolves once it listens. */
async function install(client: SvcClient, vm: string, envs: Record<string, string>): Promise<void> {
  const python = await client.stat(vm, PYTHON).catch(noneOn404);
  if (!python)
    throw new InvalidArgumentError(
      `the ${CODE_INTERPRETER_TEMPLATE} template needs ${PYTHON} in the sandbox's image (the default debian image has it)`,
    );
  const script = await serverScript();
  await client.mkdir(vm, GUEST_DIR, { recursive: true });
  await client.upload(vm, { path: GUEST_SCRIPT, permissions: '0644' }, script, script.length);
  await writeEnvs(client, vm, envs);
  await client.startProcess(vm, {
    cmd: PYTHON,
    args: [GUEST_SCRIPT, '--port', String(CODE_INTERPRETER_PORT), '--envs', GUEST_ENVS, '--warm', GUEST_WARM],
    cwd: E2B_HOME,
    tag: CODE_INTERPRETER_TAG,
    restart: 'on-failure',
  });
  await waitListening(client, vm);
}

/** The sandbox's envs, as each cell starts with them (and each context's processes). */
async function writeEnvs(client: SvcClient, vm: string, envs: Record<string, string>): Promise<void> {
  const data = Buffer.from(JSON.stringify(envs));
  await client.upload(vm, { path: GUEST_ENVS, permissions: '0600' }, data, data.length);
}

/**
 * Waits until `ready()`, while the server's process runs: a server that ended, or that has not
 * done `what` in LISTEN_TIMEOUT_MS, fails the wait, saying which.
 */
async function waitServer(client: SvcClient, vm: string, what: string, ready: () => Promise<boolean>): Promise<void> {
  for (const until = Date.now() + LISTEN_TIMEOUT_MS; !(await ready());) {
    const now = await client.process(vm, CODE_INTERPRETER_TAG);
    if (now.state === 'ended' || Date.now() > until)
      throw new Error(
        `svc's code interpreter did not ${what}` +
          (now.state === 'ended'
            ? ` (it ended: svc logs ${vm} ${CODE_INTERPRETER_TAG})`
            : ` in ${LISTEN_TIMEOUT_MS / 1000} s`),
      );
    await new Promise((r) => setTimeout(r, 200));
  }
}

const waitListening = (client: SvcClient, vm: string) =>
  waitServer(client, vm, `listen on port ${CODE_INTERPRETER_PORT}`, async () => {
    const open = await client.openPort(vm, CODE_INTERPRETER_PORT).catch(noneOn404);
    open?.destroy();
    return !!open;
  });

/** Its default kernel ran the warm-up cell (the server's --warm file is there). */
const waitWarm = (client: SvcClient, vm: string) =>
  waitServer(client, vm, 'start its kernel', async () => !!(await client.stat(vm, GUEST_WARM).catch(noneOn404)));
