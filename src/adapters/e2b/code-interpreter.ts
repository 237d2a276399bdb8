import { createHash } from 'node:crypto';
import { errorMessage } from '../../domain/errors.js';
import type { Logger } from '../../ports/logger.js';
import type { SvcClient } from '../client/svc-client.js';
import type { Instance } from '../../domain/vm.js';
import { metaOf } from './sandboxes.js';
import { installServer, serverSources, waitListening, waitWarm, writeEnvs } from '../code-interpreter/guest-server.js';

/** The template `@e2b/code-interpreter`'s `Sandbox.create()` asks for when given none. */
export const CODE_INTERPRETER_TEMPLATE = 'code-interpreter-v1';

/** What a create clones once it is ready: a suspended VM with the server running (`e2b-code-interpreter-<hash>`). */
export const CODE_INTERPRETER_VM_PREFIX = 'e2b-code-interpreter-';
/** After a prepared VM failed to be made, the next try waits this long. */
const RETRY_AFTER_MS = 10 * 60_000;
/**
 * What the prepared VM's kernel imports before it is suspended (those the image has: the debian
 * image has all three), so that a clone's `import pandas` finds it loaded: under TCG each takes
 * seconds to import.
 */
const PRELOAD = ['numpy', 'pandas', 'matplotlib.pyplot'];
/**
 * How long the prepared VM's kernel has for its warm-up cell (PRELOAD's imports). Under TCG the
 * whole make took 95 s on a quiet 2-core host, most of it this warm-up, and in a CI run's busy
 * hour it was not made in 4 min (likely the 120 s this once was ran out); the VM is made in the
 * background (a create meanwhile starts the server itself), so a slow warm-up is waited for rather
 * than thrown away.
 */
const PRELOAD_TIMEOUT_MS = 600_000;

/** The svc create of a sandbox of the template: a clone of the prepared VM, or a create of the default image. */
export interface CodeInterpreterSource {
  create: { from?: string };
  cloned: boolean;
}

/**
 * E2B's `code-interpreter-v1` template on svc (docs/e2b.md, "Code interpreter"): a sandbox of the
 * default image running svc's server (adapters/code-interpreter, on the Python standard library
 * alone) as a durable process that listens on its port, as E2B's template runs its Jupyter server.
 * The first create boots the image and starts the server in it (python3 and the server's first
 * kernel take seconds under TCG); after it, a VM of the same is made and
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
    const h = createHash('sha256');
    for (const source of await serverSources()) h.update(source);
    h.update(JSON.stringify([image.id, image.revision ?? '']));
    return `${CODE_INTERPRETER_VM_PREFIX}${h.digest('hex').slice(0, 12)}`;
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
    await installServer(this.client, sandbox.name, envs, `the ${CODE_INTERPRETER_TEMPLATE} template`);
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
        await installServer(this.client, name, {}, `the ${CODE_INTERPRETER_TEMPLATE} template`, PRELOAD);
        // its clones find the kernel started and warm (PRELOAD imported), not starting
        await waitWarm(this.client, name, PRELOAD_TIMEOUT_MS);
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
