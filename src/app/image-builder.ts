import { Readable } from 'node:stream';
import { inject, injectable } from 'inversify';
import {
  AlreadyExistsError,
  InvalidArgumentError,
  InvalidStateError,
  asDomainError,
  errorMessage,
  logLevelOf,
} from '../domain/errors.js';
import type { ImageBake, ImageImport, ImageRecipe, ImageRequest } from '../domain/image-request.js';
import type { Config } from './config.js';
import { AppConfig } from './tokens.js';
import { parseImageRequest, sourceLabel } from '../domain/image-request.js';
import { Clock } from '../ports/clock.js';
import type { ImageBuildEvent, ImageBuildPhase } from '../domain/events.js';
import type { ImageDetails } from '../ports/guest-images.js';
import { GuestImages } from '../ports/guest-images.js';
import { Logger } from '../ports/logger.js';
import { Activity } from './activity.js';
import { AsyncQueue, progressEmitter } from './async-queue.js';
import { CreateService } from './create-service.js';
import { GuestProxy } from './guest-proxy.js';
import { ImageService } from './image-service.js';
import { VmLifecycle } from './vm-lifecycle.js';
import { VmKeeper } from './vm-keeper.js';
import { Vms } from './vms.js';

export interface ImageBuildJob {
  name: string;
  events: AsyncIterable<ImageBuildEvent>;
  done: Promise<ImageDetails>;
}

const STEP_TIMEOUT_MS = 900_000;

/**
 * POST /images. A recipe boots a temporary VM of its base image, installs its packages, writes its
 * files and environment, runs its lines, shuts the VM down and bakes its disk into the new image;
 * `from_vm` bakes a stopped VM as it is. A build that fails at any step ends with an `error` event
 * naming the step and leaves nothing behind (the temporary VM is deleted; the image appears whole
 * or not at all).
 */
@injectable()
export class ImageBuilder {
  private readonly pending = new Set<string>();

  constructor(
    @inject(GuestImages) private readonly images: GuestImages,
    @inject(ImageService) private readonly imageService: ImageService,
    @inject(CreateService) private readonly creates: CreateService,
    @inject(VmLifecycle) private readonly lifecycle: VmLifecycle,
    @inject(GuestProxy) private readonly guest: GuestProxy,
    @inject(Vms) private readonly vms: Vms,
    @inject(VmKeeper) private readonly keeper: VmKeeper,
    @inject(Activity) private readonly activity: Activity,
    @inject(Clock) private readonly clock: Clock,
    @inject(Logger) private readonly log: Logger,
    @inject(AppConfig) private readonly config: Config,
  ) {}

  /** Validates and starts a build. Throws (before anything exists) InvalidArgument, AlreadyExists, InvalidState, NotFound. */
  async build(body: unknown): Promise<ImageBuildJob> {
    const req = parseImageRequest(body);
    if (
      this.pending.has(req.name) ||
      (await this.images
        .getImage(req.name, () => [])
        .then(
          () => true,
          () => false,
        ))
    ) {
      throw new AlreadyExistsError(`image ${req.name} already exists`);
    }
    // A built-in image not built yet is still taken: its name means the project's image.
    if (
      await this.images.resolveImage(req.name).then(
        () => true,
        () => false,
      )
    ) {
      throw new AlreadyExistsError(`image ${req.name} is a built-in image name; choose another`);
    }
    if (req.kind === 'recipe') await this.images.resolveImage(req.from);
    else if (req.kind === 'import') {
      if ('path' in req.source && !this.config.import_dirs.length) {
        throw new InvalidArgumentError(
          `from: this daemon imports no host files (import_dirs is empty); add the folder holding ${req.source.path} to import_dirs in its config`,
        );
      }
    } else {
      const vm = this.vms.get(req.from_vm);
      if (vm.status !== 'stopped')
        throw new InvalidStateError(`vm ${vm.name} is ${vm.status}; shut it down before baking it`);
    }
    this.pending.add(req.name);
    const queue = new AsyncQueue<ImageBuildEvent>();
    const t0 = this.clock.now();
    const emit = progressEmitter(queue, () => this.clock.now(), req.name, t0);
    const done = this.activity
      .timed('image.build', req.name, () => this.run(req, emit))
      .then(
        (img) => {
          emit('ready', `image ${img.id} is built`, { image: img });
          this.imageService.snapshotDefaultShape(img.id);
          return img;
        },
        (err: unknown) => {
          const e = asDomainError(err);
          this.log[logLevelOf(e)]({ image: req.name, err: e.message, code: e.code }, 'image build failed');
          emit('error', e.message, { error: e.message, code: e.code });
          throw e;
        },
      )
      .finally(() => {
        this.pending.delete(req.name);
        queue.close();
      });
    done.catch(() => undefined);
    return { name: req.name, events: queue, done };
  }

  private async run(
    req: ImageRequest,
    emit: (p: ImageBuildPhase, m: string, extra?: Partial<ImageBuildEvent>) => void,
  ): Promise<ImageDetails> {
    const from = req.kind === 'bake' ? `vm ${req.from_vm}` : req.kind === 'import' ? sourceLabel(req.source) : req.from;
    emit(
      'accepted',
      `${req.kind === 'bake' ? 'baking' : req.kind === 'import' ? 'importing' : 'building'} image ${req.name} from ${from}`,
    );
    if (req.kind === 'bake') return this.bake(req, emit);
    if (req.kind === 'import') return this.import(req, emit);
    return this.fromRecipe(req, emit);
  }

  private async bake(req: ImageBake, emit: (p: ImageBuildPhase, m: string) => void): Promise<ImageDetails> {
    return this.vms.withVm(req.from_vm, async (vm) => {
      if (vm.status !== 'stopped')
        throw new InvalidStateError(`vm ${vm.name} is ${vm.status}; shut it down before baking it`);
      emit('bake', `flattening the disk of vm ${vm.name}`);
      await this.images.bakeImage(req.name, this.keeper.ref(vm), {
        from_image: vm.image,
        description: req.description ?? `baked from vm ${vm.name}`,
        source: `vm:${vm.name}`,
      });
      return this.imageService.get(req.name);
    });
  }

  private async import(
    req: ImageImport,
    emit: (p: ImageBuildPhase, m: string, extra?: Partial<ImageBuildEvent>) => void,
  ): Promise<ImageDetails> {
    await this.images.importImage(
      req.name,
      req.source,
      { dirs: this.config.import_dirs, insecureRegistries: this.config.insecure_registries },
      { ssh_user: req.ssh_user, description: req.description },
      (p) => emit('import', p.message, { percent: p.percent }),
    );
    return this.imageService.get(req.name);
  }

  private async fromRecipe(r: ImageRecipe, emit: (p: ImageBuildPhase, m: string) => void): Promise<ImageDetails> {
    const vm = `img-${r.name.replace(/[^a-z0-9-]/g, '-')}-${this.clock.now().toString(36)}`
      .slice(0, 63)
      .replace(/-+$/, '');
    emit('boot', `booting a ${r.from} vm (${vm}) to build in`);
    try {
      const base = await this.images.resolveImage(r.from);
      const job = await this.creates.create(
        { name: vm, image: r.from, persistent: true, disk_gb: Math.max(base.min_disk_gb + 2, 4) },
        { wait: 'agent' },
      );
      await job.done;
      const step = async (phase: ImageBuildPhase, what: string, cmd: string, args: string[], stdin?: Buffer) => {
        emit(phase, what);
        const out = await this.guest.exec(
          vm,
          { cmd, args, timeoutMs: STEP_TIMEOUT_MS },
          stdin ? Readable.from([stdin]) : undefined,
        );
        if (out.exit_code !== 0) {
          const why = (out.stderr || out.stdout || out.error || '').trim().split('\n').slice(-4).join(' | ');
          throw new InvalidStateError(`${what} failed (exit ${out.exit_code}): ${why}`);
        }
      };
      if (r.packages.length) {
        await step('packages', `apt-get install ${r.packages.join(' ')}`, '/usr/bin/env', [
          'DEBIAN_FRONTEND=noninteractive',
          'apt-get',
          'install',
          '-y',
          '-q',
          '--no-install-recommends',
          ...r.packages,
        ]);
        await step('packages', 'apt-get clean', '/usr/bin/apt-get', ['clean']);
      }
      for (const f of r.files) {
        emit('files', `writing ${f.path}`);
        await this.guest.upload(
          vm,
          { path: f.path, mode: 'binary', permissions: f.mode.toString(8).padStart(4, '0') },
          Readable.from([f.content]),
        );
      }
      const env = Object.entries(r.env)
        .map(([k, v]) => `${k}="${v.replace(/["\\$`]/g, '\\$&')}"\n`)
        .join('');
      if (env)
        await step(
          'env',
          'adding the environment to /etc/environment',
          '/bin/sh',
          ['-c', 'cat >> /etc/environment'],
          Buffer.from(env),
        );
      for (const [i, line] of r.run.entries())
        await step('run', `run[${i}]: ${line.slice(0, 120)}`, '/bin/sh', ['-c', line]);
      await step('bake', 'syncing the guest filesystem', '/bin/sync', []);
      await this.lifecycle.shutdown(vm);
      emit('bake', `flattening the disk into image ${r.name}`);
      const rec = this.vms.get(vm);
      await this.images.bakeImage(r.name, this.keeper.ref(rec), {
        from_image: rec.image,
        description:
          r.description ?? `${r.from} with ${[...r.packages, ...r.files.map((f) => f.path)].join(', ') || 'a recipe'}`,
        source: `recipe:${r.from}`,
      });
      return await this.imageService.get(r.name);
    } finally {
      if (this.vms.find(vm))
        await this.lifecycle
          .delete(vm)
          .catch((err) => this.log.error({ vm, err: errorMessage(err) }, 'could not delete the build vm'));
    }
  }
}
