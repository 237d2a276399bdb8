import { inject, injectable } from 'inversify';
import type { NodeView } from '../domain/cluster.js';
import { NotFoundError } from '../domain/errors.js';
import { checkBundle, type ImageFetchProgress } from '../domain/image-fetch.js';
import { PeerNodes } from '../ports/cluster.js';
import { GuestImages } from '../ports/guest-images.js';
import { Logger } from '../ports/logger.js';
import { ClusterService } from './cluster-service.js';
import { KeyedMutex } from './keyed-mutex.js';

/**
 * Images across the nodes of a cluster (docs/cluster.md, "Images across nodes"): an image imported
 * or baked on one node is fetched by another the first time it needs it (a create placed there, a
 * VM moved there), from a ready node that lists it, file by file with each file's sha256 and the
 * image's digest checked, resuming what a fetch cut off left. Built-in images are built by each node.
 */
/** How often a fetch under way says how far it is. */
const PROGRESS_MS = 1000;

@injectable()
export class ImageFetchService {
  private readonly locks = new KeyedMutex();

  constructor(
    @inject(ClusterService) private readonly cluster: ClusterService,
    @inject(PeerNodes) private readonly peers: PeerNodes,
    @inject(GuestImages) private readonly images: GuestImages,
    @inject(Logger) private readonly log: Logger,
  ) {}

  /** Is image `image` here, or one this node builds itself? */
  private async local(image: string): Promise<boolean> {
    return this.images.resolveImage(image).then(
      () => true,
      () => false,
    );
  }

  /**
   * Makes sure image `image` is here: nothing when it is (or is a built-in one this node builds),
   * else fetched from a ready node that has it. NotFoundError when no node has it. `progress`
   * hears how far the fetch is: when it starts, at most every PROGRESS_MS while it runs, and at
   * its end (a caller that waits on another's fetch of the image hears nothing).
   */
  async ensureHere(image: string, progress?: (p: ImageFetchProgress) => void): Promise<void> {
    if (await this.local(image)) return;
    await this.locks.run(image, async () => {
      if (await this.local(image)) return;
      const from = this.cluster.holders(image).find((n) => n.node !== this.cluster.self);
      if (!from) throw new NotFoundError(`no ready node of the cluster has image ${image}`);
      const t0 = Date.now();
      const bundle = checkBundle(await this.peers.imageBundle(from, image), image);
      const total = bundle.files.reduce((n, f) => n + f.size, 0);
      const tell = (bytes: number) => progress?.({ image, from: from.node, bytes, total });
      let told = 0;
      tell(0);
      await this.images.installImage(bundle, (dir) =>
        this.peers.fetchImageFiles(from, bundle, dir, (bytes) => {
          if (Date.now() - told < PROGRESS_MS) return;
          told = Date.now();
          tell(bytes);
        }),
      );
      tell(total);
      this.log.info({ image, from: from.node, bytes: total, ms: Date.now() - t0 }, 'image fetched from another node');
    });
  }

  /** Asks `node` (this one or another) to have image `image` before a create is sent there. */
  async ensureOn(node: NodeView, image: string, progress?: (p: ImageFetchProgress) => void): Promise<void> {
    if (node.images.includes(image)) return;
    if (node.node === this.cluster.self) return this.ensureHere(image, progress);
    await this.peers.fetchImageOn(node, image, progress);
  }
}
