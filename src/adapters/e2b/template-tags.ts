import { mkdir, readFile, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { KeyedMutex } from '../../app/keyed-mutex.js';
import { InvalidArgumentError, NotFoundError, errorMessage } from '../../domain/errors.js';
import type { Instance } from '../../domain/vm.js';
import type { SvcClient } from '../client/svc-client.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import { TPL } from './template-run.js';

/**
 * A template's tags, as E2B keeps them: each tag names one of the template's builds (a suspended
 * VM, template-run.ts), `name` alone means `name:default`, and `name:<build id>` names that build.
 * A build the cache answered with a kept build (templates.ts) has its id written down as another
 * name of that build (`same`). svc keeps the builds that a tag names: a build no tag names any
 * more is deleted (unless a sandbox cloned from it stands on it: then it stays until a later
 * change of the template's tags can delete it).
 *
 * One JSON file per template, `<dir>/<template id>.json`, written whole and atomically; changes
 * to one template run one after the other.
 */
export interface TagFile {
  tags: Record<string, { buildID: string; createdAt: string }>;
  /** A build id the cache answered with a kept build -> that build's id. */
  same: Record<string, string>;
}

export const DEFAULT_TAG = 'default';
/** A template's id: `tpl-` and 16 hex digits of its name's hash (templates.ts). */
export const TEMPLATE_ID = /^tpl-[0-9a-f]{16}$/;
/** A tag: what E2B takes, and nothing a path or a `name:tag` could be confused by. */
const TAG = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
/** The most tags one call may name. */
const MAX_TAGS = 50;

/** A built template: a suspended VM carrying TPL's tags. */
export function templateOf(vm: Instance): { templateID: string; name: string } | undefined {
  const id = vm.tags[TPL.id];
  return id && vm.status === 'suspended' ? { templateID: id, name: vm.tags[TPL.name] ?? '' } : undefined;
}

/** `name`, `name:tag` or `name:<build id>`: the name and the tag (`default` when none is given). */
export function parseRef(ref: string): { name: string; tag: string } {
  const at = ref.lastIndexOf(':');
  return at < 0 ? { name: ref, tag: DEFAULT_TAG } : { name: ref.slice(0, at), tag: ref.slice(at + 1) || DEFAULT_TAG };
}

/** The tags a call names, checked: a 400 names the first that is not one. */
export function checkTags(tags: unknown): string[] {
  const list = typeof tags === 'string' ? [tags] : tags;
  if (!Array.isArray(list) || list.length > MAX_TAGS)
    throw new InvalidArgumentError(`tags must be a list of at most ${MAX_TAGS}`);
  for (const t of list)
    if (typeof t !== 'string' || !TAG.test(t))
      throw new InvalidArgumentError(
        `tag ${JSON.stringify(t)}: letters, digits, . _ - (1 to 128), starting with a letter or digit`,
      );
  return [...new Set(list as string[])];
}

type Log = (message: string, level?: 'info' | 'warn') => void;

export class TemplateTags {
  private readonly lock = new KeyedMutex();

  constructor(
    private readonly client: SvcClient,
    /** Where the tag files are. */
    private readonly dir: string,
    /** A build deleted: what else is kept of it goes (its defaults). */
    private readonly forgetBuild: (vm: string) => Promise<void>,
  ) {}

  /**
   * The build `ref` names (`name`, `name:tag`, `name:<build id>`; a template id in place of the
   * name); none when there is no template of that name, a 404 when it has no such tag or build.
   */
  async find(all: Instance[], ref: string): Promise<Instance | undefined> {
    const { name, tag } = parseRef(ref);
    const builds = buildsOf(all, name);
    if (!builds.length) return undefined;
    const f = seeded(await this.read(builds[0].tags[TPL.id]), builds);
    const id = buildNamed(f, tag);
    const build = builds.find((vm) => vm.tags[TPL.build] === id);
    if (!build)
      throw new NotFoundError(
        `template ${name} has no build tagged ${tag} (its tags: ${Object.keys(f.tags).sort().join(', ') || 'none'})`,
      );
    return build;
  }

  /** GET /templates/{id}/tags: each tag, the build it names, and when it was set; by tag. */
  async list(ref: string): Promise<{ tag: string; buildID: string; createdAt: string }[]> {
    const builds = buildsOf(await this.client.list(), ref);
    if (!builds.length) throw new NotFoundError(`template ${ref} not found`);
    const f = seeded(await this.read(builds[0].tags[TPL.id]), builds);
    return Object.entries(f.tags)
      .map(([tag, t]) => ({ tag, buildID: t.buildID, createdAt: t.createdAt }))
      .sort((a, b) => a.tag.localeCompare(b.tag));
  }

  /**
   * Points `tags` at `buildID` (a build just made, or the kept build the cache answered with:
   * then `asked` is the id the build was asked under), then deletes the builds no tag names.
   */
  async set(templateID: string, buildID: string, tags: string[], log: Log = () => undefined, asked = buildID) {
    await this.change(templateID, log, buildID, (f) => {
      const at = new Date().toISOString();
      for (const t of tags) f.tags[t] = { buildID, createdAt: at };
      if (asked !== buildID) f.same[asked] = buildID;
    });
  }

  /** POST /templates/tags: `tags` name the build `target` names (`name:tag` or `name:<build id>`). */
  async assign(target: string, tags: string[]): Promise<{ buildID: string; tags: string[] }> {
    if (!tags.length) throw new InvalidArgumentError('tags: name at least one');
    const vm = await this.find(await this.client.list(), target);
    if (!vm) throw new NotFoundError(`template build ${target} not found`);
    await this.set(vm.tags[TPL.id], vm.tags[TPL.build], tags);
    return { buildID: vm.tags[TPL.build], tags };
  }

  /** DELETE /templates/tags: the tags go from template `name`; a build no tag names then goes too. */
  async remove(name: string, tags: string[]): Promise<void> {
    if (!tags.length) throw new InvalidArgumentError('tags: name at least one');
    const builds = buildsOf(await this.client.list(), parseRef(name).name);
    if (!builds.length) throw new NotFoundError(`template ${name} not found`);
    await this.change(
      builds[0].tags[TPL.id],
      () => undefined,
      undefined,
      (f) => {
        const missing = tags.filter((t) => !f.tags[t]);
        if (missing.length) throw new NotFoundError(`template ${name} has no tag ${missing.join(', ')}`);
        for (const t of tags) delete f.tags[t];
      },
    );
  }

  async forget(templateID: string): Promise<void> {
    await rm(this.file(templateID), { force: true });
  }

  /**
   * At the daemon's start: the files of templates that have no build any more go; with `builds`,
   * so do the builds no tag names (a stop between a change of tags and its deletes left them).
   * The VMs it removed.
   */
  async sweep(all: Instance[], o: { builds: boolean }): Promise<string[]> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    const live = new Set(all.map((vm) => vm.tags[TPL.id]).filter(Boolean));
    const gone: string[] = [];
    for (const n of names) {
      if (!n.endsWith('.json')) continue;
      const id = n.slice(0, -5);
      if (!live.has(id)) await rm(join(this.dir, n), { force: true });
      else if (o.builds && TEMPLATE_ID.test(id))
        gone.push(
          ...(await this.change(
            id,
            () => undefined,
            undefined,
            () => {},
          )),
        );
    }
    return gone;
  }

  /** The template's file; none when it has none (a template built before svc kept tags). */
  private async read(templateID: string): Promise<TagFile | undefined> {
    const text = await readFile(this.file(templateID), 'utf8').catch(() => '');
    if (!text) return undefined;
    const r = JSON.parse(text) as Partial<TagFile>;
    return { tags: r.tags ?? {}, same: r.same ?? {} };
  }

  /**
   * Changes a template's tags (`edit` in place), one change of a template at a time, then deletes
   * the template's builds that no tag names and forgets the ids that named them. `made` is a build
   * tagged for the first time: never the `default` of a template from before svc kept tags.
   */
  private change(
    templateID: string,
    log: Log,
    made: string | undefined,
    edit: (f: TagFile) => void,
  ): Promise<string[]> {
    return this.lock.run(templateID, async () => {
      const builds = (await this.client.list()).filter((vm) => templateOf(vm)?.templateID === templateID);
      const older = builds.filter((vm) => vm.tags[TPL.build] !== made);
      const f = seeded(await this.read(templateID), older);
      edit(f);
      await mkdir(this.dir, { recursive: true, mode: 0o700 });
      await writeFileAtomic(this.file(templateID), `${JSON.stringify(f)}\n`);
      const named = new Set(Object.values(f.tags).map((t) => t.buildID));
      const kept = new Set(named);
      const removed: string[] = [];
      for (const vm of builds) {
        if (named.has(vm.tags[TPL.build])) continue;
        await this.client.delete(vm.name).then(
          async () => {
            removed.push(vm.name);
            await this.forgetBuild(vm.name);
            log(`removed ${vm.name}, a build of the template no tag names any more`);
          },
          (err: unknown) => {
            kept.add(vm.tags[TPL.build]);
            log(`kept ${vm.name}, a build no tag names: ${errorMessage(err)}`, 'warn');
          },
        );
      }
      const same = Object.entries(f.same).filter(([, id]) => kept.has(id));
      if (same.length !== Object.keys(f.same).length) {
        f.same = Object.fromEntries(same);
        await writeFileAtomic(this.file(templateID), `${JSON.stringify(f)}\n`);
      }
      return removed;
    });
  }

  private file(templateID: string): string {
    if (!TEMPLATE_ID.test(templateID)) throw new NotFoundError(`template ${templateID} not found`);
    return join(this.dir, `${templateID}.json`);
  }
}

/** A template's builds among `all`, by its name or id. */
export function buildsOf(all: Instance[], name: string): Instance[] {
  return all.filter((vm) => {
    const t = templateOf(vm);
    return t && (t.templateID === name || t.name === name);
  });
}

/** The build id a tag names in `f`: a tag first, else a build id (one the cache answered, or a build's own). */
function buildNamed(f: TagFile, tag: string): string {
  return f.tags[tag]?.buildID ?? f.same[tag] ?? tag;
}

/** A template's file; one built before svc kept tags has none: its newest build is its `default`. */
function seeded(f: TagFile | undefined, builds: Instance[]): TagFile {
  if (f) return f;
  const newest = [...builds].sort((a, b) => b.created_at.localeCompare(a.created_at))[0];
  const tags: TagFile['tags'] = {};
  if (newest) tags[DEFAULT_TAG] = { buildID: newest.tags[TPL.build], createdAt: newest.created_at };
  return { tags, same: {} };
}
