import { createHash, createHmac, randomBytes } from 'node:crypto';
import { mkdir, readdir, readFile, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import {
  AlreadyExistsError,
  InvalidArgumentError,
  NotFoundError,
  PayloadTooLargeError,
  errorMessage,
} from '../../domain/errors.js';
import { normalRegistryRef } from '../../domain/image-request.js';
import type { Instance } from '../../domain/vm.js';
import type { SvcClient } from '../client/svc-client.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import { sameSecret } from '../http-kit/auth.js';
import { snapshotOf } from './sandboxes.js';
import {
  TPL,
  TemplateRun,
  logTo,
  type Build,
  type BuildSpec,
  type RunBase,
  type TemplateDefaults,
  type TemplateStep,
} from './template-run.js';
import { FILES_HASH, checkBuild } from './template-check.js';
import { RegistryBases } from './registry-bases.js';
import { registryLogin } from './registry-logins.js';
import { BuildRecords } from './build-records.js';
import { TemplateTags, checkTags, parseRef, templateOf } from './template-tags.js';

export { TPL, type BuildSpec, type RunBase } from './template-run.js';
export { templateOf } from './template-tags.js';

/** The most an upload of a COPY's files may hold. */
export const TEMPLATE_FILE_MAX_BYTES = 1 << 30;
const NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;

/**
 * E2B's template build API's state: builds requested, under way and ended (in memory, and in
 * `<dir>/builds` so that a restart keeps them), uploads (`<dir>/files`), and the templates'
 * defaults (`<dir>/templates`); template-run.ts runs a build.
 */
export class TemplateBuilds {
  private readonly builds = new Map<string, Build>();
  private readonly records: BuildRecords;
  /** Signs upload links; kept in `<dir>/upload-key` (`open`), so a link outlives a restart as its build does. */
  private key = randomBytes(32);
  private readonly runner: TemplateRun;
  /** Each template's tags, and which of its builds are kept. */
  readonly tags: TemplateTags;
  /** Registry images pulled as bases, and their older versions pruned. */
  private readonly registry: RegistryBases;

  constructor(
    private readonly client: SvcClient,
    /** Where uploads (`files/`) and templates' defaults (`templates/`) are kept. */
    private readonly dir: string,
  ) {
    this.tags = new TemplateTags(client, join(dir, 'tags'), (vm) => this.forget(vm));
    this.records = new BuildRecords(join(dir, 'builds'));
    this.registry = new RegistryBases(client);
    this.runner = new TemplateRun(client, {
      file: (hash) => this.file(hash),
      record: (vm) => this.record(vm),
      settle: (b, log) => this.tags.set(b.templateID, b.buildID, b.tags, log),
    });
  }

  /** Reads the builds kept by the daemon's last run (BuildRecords); before the routes are served. */
  async open(): Promise<void> {
    for (const b of await this.records.load()) this.builds.set(b.buildID, b);
    const file = join(this.dir, 'upload-key');
    const kept = await readFile(file).catch(() => undefined);
    if (kept?.length === 32) this.key = kept;
    else {
      await mkdir(this.dir, { recursive: true, mode: 0o700 });
      await writeFileAtomic(file, this.key);
    }
  }

  /**
   * POST /v3/templates: a build of `name` (`name:tag`), to be tagged with its tag (`default` when
   * none is given) and the request's `tags` when it is ready.
   */
  request(body: { name?: unknown; alias?: unknown; cpuCount?: unknown; memoryMB?: unknown; tags?: unknown }) {
    const full = String(body.name ?? body.alias ?? '');
    const { name, tag } = parseRef(full);
    if (!NAME.test(name))
      throw new InvalidArgumentError(
        `template name ${JSON.stringify(full)}: lowercase letters, digits, . _ - (1 to 63), then :tag if any`,
      );
    for (const [k, v, max] of [
      ['cpuCount', body.cpuCount, 64],
      ['memoryMB', body.memoryMB, 262_144],
    ] as const)
      if (v !== undefined && (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > max))
        throw new InvalidArgumentError(`${k} must be a whole number from 1 to ${max}`);
    const tags = checkTags([tag, ...(body.tags === undefined || body.tags === null ? [] : checkTags(body.tags))]);
    this.refuseSecond(name);
    this.prune();
    const templateID = `tpl-${createHash('sha256').update(name).digest('hex').slice(0, 16)}`;
    const buildID = randomBytes(8).toString('hex');
    const b: Build = {
      templateID,
      buildID,
      name,
      tags,
      cpus: body.cpuCount as number | undefined,
      memoryMb: body.memoryMB as number | undefined,
      status: 'waiting',
      logs: [],
    };
    this.builds.set(buildID, b);
    void this.records.save(b);
    return { templateID, buildID, names: [name], aliases: [name], tags, public: false };
  }

  /** One build of a name at a time: a build that is done removes the ones before it. */
  private refuseSecond(name: string): void {
    const building = [...this.builds.values()].find((b) => b.name === name && b.status === 'building');
    if (building) throw new AlreadyExistsError(`template ${name} is being built (build ${building.buildID})`);
  }

  /**
   * Builds that ended are told about for a while: the newest 100 of them are kept. So are the
   * newest 100 requested and never started (kept on disk, they would otherwise pile up for good).
   */
  private prune(): void {
    const all = [...this.builds.values()];
    const ended = all.filter((b) => b.status === 'ready' || b.status === 'error');
    const waiting = all.filter((b) => b.status === 'waiting');
    // all but the newest 100 of each
    for (const b of [...ended.slice(0, -100), ...waiting.slice(0, -100)]) {
      this.builds.delete(b.buildID);
      void this.records.remove(b.buildID);
    }
  }

  private build(templateID: string, buildID: string): Build {
    const b = this.builds.get(buildID);
    if (!b || b.templateID !== templateID)
      throw new NotFoundError(`build ${buildID} of template ${templateID} not found`);
    return b;
  }

  /** A build still being told about: its name (the alias check). */
  pendingName(name: string): string | undefined {
    return [...this.builds.values()].find((b) => b.name === name && (b.status === 'waiting' || b.status === 'building'))
      ?.templateID;
  }

  /** GET /templates/{id}/files/{hash}: whether svc has these files, and where to PUT them if not. */
  async uploadLink(templateID: string, hash: string, origin: string) {
    if (!FILES_HASH.test(hash)) throw new InvalidArgumentError('a files hash is 64 hex digits');
    if (![...this.builds.values()].some((b) => b.templateID === templateID))
      throw new NotFoundError(`template ${templateID} has no build requested`);
    const present = await stat(this.file(hash)).then(
      (s) => s.isFile(),
      () => false,
    );
    if (present) return { present: true };
    return {
      present: false,
      url: `${origin}/e2b/templates/${templateID}/files/${hash}?token=${this.sign(templateID, hash)}`,
    };
  }

  /** PUT of an upload link: the archive, kept under its hash. */
  async upload(templateID: string, hash: string, token: string, size: number, body: Readable): Promise<void> {
    if (!FILES_HASH.test(hash) || !sameSecret(token, this.sign(templateID, hash)))
      throw new InvalidArgumentError('this is not an upload link svc gave');
    if (!(size > 0)) throw new InvalidArgumentError('an upload needs its Content-Length');
    if (size > TEMPLATE_FILE_MAX_BYTES)
      throw new PayloadTooLargeError(`a COPY's files may hold at most ${TEMPLATE_FILE_MAX_BYTES} bytes, got ${size}`);
    await mkdir(join(this.dir, 'files'), { recursive: true, mode: 0o700 });
    await writeFileAtomic(this.file(hash), body);
    if ((await stat(this.file(hash))).size !== size) {
      await rm(this.file(hash), { force: true });
      throw new InvalidArgumentError(`the upload ended before its ${size} bytes`);
    }
  }

  /** POST /v2/templates/{id}/builds/{build}: checks the steps, then builds in the background. */
  async start(templateID: string, buildID: string, spec: BuildSpec): Promise<void> {
    const b = this.build(templateID, buildID);
    if (b.status !== 'waiting') throw new AlreadyExistsError(`build ${buildID} has been started already`);
    const steps = checkBuild(spec);
    this.refuseSecond(b.name);
    // taken now, before the first wait: a second start of it or of its name is refused from here;
    // a base or cache that cannot be looked up gives it back
    b.status = 'building';
    void this.records.save(b);
    let base: RunBase;
    let same: Instance | undefined;
    let release = () => {};
    try {
      const all = await this.client.list();
      base = await this.base(spec, all);
      release = this.registry.hold(base);
      b.key = await this.keyOf(base, steps, spec, b);
      const force = spec.force === true || steps.some((s) => s.force === true);
      same = force ? undefined : all.find((vm) => this.cached(vm, b));
    } catch (err) {
      release();
      b.status = 'waiting';
      void this.records.save(b);
      throw err;
    }
    if (!same)
      return void this.runner
        .run(b, base, steps, spec)
        .finally(release)
        .then(() => this.records.save(b));
    release();
    // the cache: a kept build of this template made from the same base, steps, files and commands
    const log = (message: string, level: 'info' | 'warn' = 'info') => logTo(b, message, 'finalize', level);
    log(`cached: build ${same.tags[TPL.build]} (${same.name}) was made from the same base, steps and files`);
    try {
      await this.tags.set(b.templateID, same.tags[TPL.build], b.tags, log, b.buildID);
      b.status = 'ready';
      log(`template ${b.name} (${b.templateID}) is ready`);
    } catch (err) {
      b.reason = { message: errorMessage(err), step: 'finalize' };
      b.status = 'error';
    }
    void this.records.save(b);
  }

  /** `vm` is a kept build of `b`'s template that `b` would make again. */
  private cached(vm: Instance, b: Build): boolean {
    return templateOf(vm)?.templateID === b.templateID && vm.tags[TPL.key] === b.key;
  }

  /**
   * What makes a build what it is, hashed: its base (a clone's VM, which never changes, or an
   * image and the revision it is at), its steps with their files' hashes, its commands and size.
   */
  private async keyOf(base: RunBase, steps: TemplateStep[], spec: BuildSpec, b: Build): Promise<string> {
    const c = base.create as { from?: string; image?: string };
    const image = c.from ? undefined : await this.client.getImage(c.image ?? 'default').catch(() => undefined);
    const what = {
      base: c.from ? { from: c.from } : { image: image?.id ?? c.image ?? 'default', revision: image?.revision ?? null },
      steps: steps.map((s) => [s.type, s.args ?? [], s.filesHash ?? null]),
      start: spec.startCmd ?? null,
      ready: spec.readyCmd ?? null,
      cpus: b.cpus ?? null,
      memoryMb: b.memoryMb ?? null,
    };
    return createHash('sha256').update(JSON.stringify(what)).digest('hex');
  }

  /** GET /templates/{id}/builds/{build}/status: its state and its log from `offset`. */
  status(templateID: string, buildID: string, offset: number) {
    const b = this.build(templateID, buildID);
    const entries = b.logs.slice(Math.max(0, offset));
    return {
      templateID,
      buildID,
      status: b.status,
      logEntries: entries,
      logs: entries.map((e) => `[${e.timestamp}] ${e.message}`),
      ...(b.reason ? { reason: { ...b.reason, logEntries: [] } } : {}),
    };
  }

  /**
   * What a build's base means for svc's create, among the VMs `all`: a template or a snapshot to
   * clone (a template's environment and folder carry on), an svc image, the default image, or
   * (`fromImage` only) a registry's image that svc pulls first as `reg-<hash of its reference>`.
   */
  private async base(spec: BuildSpec, all: Instance[]): Promise<RunBase> {
    const ref = spec.fromTemplate ?? spec.fromImage ?? 'e2bdev/base';
    if (ref === 'base' || ref === 'e2bdev/base') return { create: {} };
    const clone = await this.cloneOf(all, ref);
    if (clone) return clone;
    if (/^debian(:(stable|12|bookworm|latest|stable-slim|bookworm-slim))?$/.test(ref))
      return { create: { image: 'debian' } };
    const images = await this.client.listImages();
    const image = images.find((i) => i.id === ref);
    // E2B runs a template's start command, never its image's own (CMD, ENTRYPOINT): nor does svc here.
    if (image) return { create: { image: image.id, entrypoint: false } };
    if (spec.fromImage === undefined)
      throw new InvalidArgumentError(`base ${ref}: not an svc image, template or snapshot`);
    const from = normalRegistryRef(ref, 'fromImage');
    return this.registry.base(from, await registryLogin(spec.fromImageRegistry), images);
  }

  /**
   * The template build (by name, `name:tag`, `name:<build id>` or id; templates-tags.ts) or snapshot (by name or id) among
   * `all` that `ref` names, as svc's create of a clone of it, with a template's defaults. What a
   * sandbox's create and a build's base both clone.
   */
  async cloneOf(all: Instance[], ref: string): Promise<RunBase | undefined> {
    const tpl = await this.tags.find(all, ref);
    if (tpl) return { create: { from: tpl.name }, defaults: await this.defaults(tpl.name) };
    const snap = all.map(snapshotOf).find((x) => x?.names.includes(ref) || x?.snapshotID === ref);
    return snap ? { create: { from: snap.snapshotID } } : undefined;
  }

  async defaults(vm: string): Promise<TemplateDefaults> {
    const text = await readFile(this.record(vm), 'utf8').catch(() => '{}');
    const r = JSON.parse(text) as Partial<TemplateDefaults>;
    return { envs: r.envs ?? {}, workdir: r.workdir };
  }

  /** A template VM deleted: its defaults go, and an older version of a registry base it alone stood on. */
  async forget(vm: string): Promise<void> {
    await rm(this.record(vm), { force: true });
    void this.pruneBases();
  }

  private async pruneBases(): Promise<void> {
    await this.registry.prune().catch(() => undefined);
  }

  /**
   * At the daemon's start: a build cut off by a stop left its VM running (a template is
   * suspended), a stop between a change of tags and its deletes left builds no tag names, and
   * defaults and tags may be left of templates deleted meanwhile, and older versions of registry
   * bases nothing uses. All go. In a cluster other
   * nodes' builds are not this node's to judge, so only the files are looked at there.
   */
  async sweep(o: { vms: boolean }): Promise<string[]> {
    const all = await this.client.list();
    const gone: string[] = [];
    if (o.vms)
      for (const vm of all)
        if (vm.tags[TPL.build] && !templateOf(vm) && this.builds.get(vm.tags[TPL.build])?.status !== 'building') {
          await this.client.delete(vm.name).then(
            () => gone.push(vm.name),
            () => undefined,
          );
        }
    gone.push(
      ...(await this.tags.sweep(
        all.filter((vm) => !gone.includes(vm.name)),
        { builds: o.vms },
      )),
    );
    const kept = new Set(all.filter((vm) => !gone.includes(vm.name)).map((vm) => vm.name));
    const records = await readdir(join(this.dir, 'templates')).catch(() => [] as string[]);
    for (const f of records)
      if (f.endsWith('.json') && !kept.has(f.slice(0, -5))) await rm(join(this.dir, 'templates', f), { force: true });
    // a stop between a build's delete and the prune after it left an older registry base behind
    if (o.vms) await this.pruneBases();
    return gone;
  }

  private record(vm: string): string {
    return join(this.dir, 'templates', `${vm}.json`);
  }

  private file(hash: string): string {
    return join(this.dir, 'files', `${hash}.tar`);
  }

  private sign(templateID: string, hash: string): string {
    return createHmac('sha256', this.key).update(`${templateID}:${hash}`).digest('hex');
  }
}
