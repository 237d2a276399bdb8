import { createHash } from 'node:crypto';
import { errorMessage } from '../../domain/errors.js';
import { repositoryOf } from '../../domain/image-request.js';
import type { ImageDetails } from '../../ports/guest-images.js';
import type { SvcClient } from '../client/svc-client.js';
import type { RunBase } from './template-run.js';

/** The images svc pulled for builds' bases: `reg-<16 digits of the reference's hash>[-<12 of its digest>]`. */
const PULLED = /^(reg-[a-f0-9]{16})(-[a-f0-9]{12})?$/;

/**
 * Container images in registries as E2B builds' bases. Each version of a reference is pulled once,
 * as an svc image of its own; older versions go once nothing stands on them (`prune`).
 */
export class RegistryBases {
  /** The pulled images that builds under way were given as their base, and how many builds each. */
  private readonly held = new Map<string, number>();

  constructor(private readonly client: SvcClient) {}

  /**
   * `from` (a normal registry reference) as a build's base, among the svc images `images`:
   * `reg-<hash of the reference>-<its digest's first 12 digits>`, so a tag that moved is pulled
   * again (its new version) and one that did not is not. The digest is asked of the registry at
   * each build; one that does not answer (or refuses) leaves the newest version pulled before,
   * said in the build's log, or fails the build when there is none.
   */
  async base(
    from: string,
    auth: { username: string; password: string } | undefined,
    images: ImageDetails[],
  ): Promise<RunBase> {
    const prefix = `reg-${createHash('sha256').update(from).digest('hex').slice(0, 16)}`;
    let digest: string;
    try {
      ({ digest } = await this.client.resolveImage(`docker://${from}`, auth));
    } catch (err) {
      const before = newestFirst(images.filter((i) => PULLED.exec(i.id)?.[1] === prefix))[0];
      if (!before) throw err;
      return {
        create: { image: before.id, entrypoint: false },
        note: {
          message: `could not ask the registry what docker://${from} is now (${errorMessage(err)}); building from image ${before.id}, pulled before`,
          warn: true,
        },
      };
    }
    const name = `${prefix}-${digest.slice(7, 19)}`;
    const create = { image: name, entrypoint: false };
    if (images.some((i) => i.id === name)) return { create };
    return {
      create,
      // pinned to the digest asked for: the image is that version even if the tag moves meanwhile
      pull: { name, from: `docker://${repositoryOf(from)}@${digest}`, ...(auth ? { registry_auth: auth } : {}) },
      note: { message: `docker://${from} is ${digest}` },
    };
  }

  /** A build takes `base` for its boot: a pulled image it names is not pruned until `release`. */
  hold(base: RunBase): () => void {
    const image = base.create.image;
    if (typeof image !== 'string' || !PULLED.test(image)) return () => undefined;
    this.held.set(image, (this.held.get(image) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const n = (this.held.get(image) ?? 1) - 1;
      if (n > 0) this.held.set(image, n);
      else this.held.delete(image);
    };
  }

  /**
   * Removes the versions of each reference that are not its newest, that no VM, template or pool
   * uses (the daemon's delete refuses those) and that no build under way was given. Answers what
   * went. What cannot go now (used meanwhile, or the daemon says no) stays for the next prune.
   */
  async prune(): Promise<string[]> {
    const byRef = new Map<string, ImageDetails[]>();
    for (const image of await this.client.listImages()) {
      const prefix = PULLED.exec(image.id)?.[1];
      if (prefix) byRef.set(prefix, [...(byRef.get(prefix) ?? []), image]);
    }
    const gone: string[] = [];
    for (const versions of byRef.values())
      for (const old of newestFirst(versions).slice(1))
        if (old.in_use_by.length === 0 && !this.held.has(old.id))
          await this.client.deleteImage(old.id).then(
            () => gone.push(old.id),
            () => undefined,
          );
    return gone;
  }
}

function newestFirst(images: ImageDetails[]): ImageDetails[] {
  return [...images].sort((a, b) => b.created_at.localeCompare(a.created_at));
}
