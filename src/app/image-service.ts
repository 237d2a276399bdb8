import { inject, injectable } from 'inversify';
import { AlreadyExistsError } from '../domain/errors.js';
import { assertImageId } from '../domain/image-request.js';
import type { ImageDetails } from '../ports/hypervisor.js';
import { GuestImages } from '../ports/hypervisor.js';
import { Activity } from './activity.js';
import type { Config } from './config.js';
import { AppConfig } from './tokens.js';
import { Vms } from './vms.js';

/** GET/DELETE /images: the built images, what stands on each, and removing one nothing uses. */
@injectable()
export class ImageService {
  constructor(
    @inject(GuestImages) private readonly images: GuestImages,
    @inject(Vms) private readonly vms: Vms,
    @inject(Activity) private readonly activity: Activity,
    @inject(AppConfig) private readonly config: Config,
  ) {}

  /** VMs (templates and warm pool members included) whose disk stands on the image. */
  private readonly inUse = (id: string): string[] =>
    this.vms
      .all()
      .filter((r) => r.image === id)
      .map((r) => r.name)
      .sort();

  list(): Promise<ImageDetails[]> {
    return this.images.listImages(this.inUse);
  }

  get(id: string): Promise<ImageDetails> {
    return this.images.getImage(assertImageId(id, 'image'), this.inUse);
  }

  /** 409 while a VM, a template or the warm pool's template uses it. */
  async remove(id: string): Promise<{ message: string; id: string }> {
    const img = await this.get(id);
    return this.activity.timed('image.delete', img.id, async () => {
      if (img.in_use_by.length)
        throw new AlreadyExistsError(
          `image ${img.id} is in use by ${img.in_use_by.join(', ')}; delete those vms first`,
        );
      const pool = this.config.warm_pool.template;
      if (pool && this.vms.find(pool)?.image === img.id)
        throw new AlreadyExistsError(`image ${img.id} is in use by the warm pool (template ${pool})`);
      await this.images.removeImage(img.id);
      return { message: `image ${img.id} deleted`, id: img.id };
    });
  }
}
