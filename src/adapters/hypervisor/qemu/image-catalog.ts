import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { InternalError, InvalidArgumentError } from '../../../domain/errors.js';

const run = promisify(execFile);

/** `data_dir/images/<id>/manifest.json` as image/build-image.sh writes it. */
export interface ImageManifest {
  id: string;
  format: number;
  kernel: string;
  initrd: string;
  disk: string;
  disk_gb: number;
  cmdline: string;
  ssh_user: string;
  agent_ready: boolean;
  agent_version?: string;
}

export interface ResolvedImage extends ImageManifest {
  dir: string;
}

const REPO = fileURLToPath(new URL('../../../../../', import.meta.url));
export const BUILD_SCRIPT = join(REPO, 'image', 'build-image.sh');
export const AGENT_DIR = join(REPO, 'dist', 'agent');

/**
 * The images the QEMU adapter can boot. The project's own image, `default`, is built on first
 * use when it is missing (image/build-image.sh, from Debian packages; see docs/image.md).
 */
export class ImageCatalog {
  private building: Promise<void> | undefined;

  constructor(private readonly root: string) {}

  dir(id: string): string {
    return join(this.root, id);
  }

  async get(id: string): Promise<ResolvedImage> {
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(id)) throw new InvalidArgumentError(`invalid image name ${JSON.stringify(id)}`);
    const dir = this.dir(id);
    const manifest = join(dir, 'manifest.json');
    if (!existsSync(manifest)) {
      if (id !== 'default') throw new InvalidArgumentError(`unknown image "${id}" (no ${manifest})`);
      await this.build(id);
    }
    const m = JSON.parse(readFileSync(manifest, 'utf8')) as ImageManifest;
    for (const f of [m.kernel, m.disk]) {
      if (!existsSync(join(dir, f))) throw new InternalError(`image ${id} is incomplete: ${f} missing`);
    }
    return { ...m, id, dir };
  }

  /** Builds an image once even when several creates ask at the same time. */
  build(id = 'default'): Promise<void> {
    this.building ??= (async () => {
      if (!existsSync(join(AGENT_DIR, 'svc-agent.cjs'))) {
        throw new InternalError(`cannot build image ${id}: the agent is not built (npm run build:agent)`);
      }
      try {
        await run('bash', [BUILD_SCRIPT, this.dir(id), AGENT_DIR], { maxBuffer: 16 << 20, timeout: 600_000 });
      } catch (err) {
        const e = err as { stderr?: string; message: string };
        throw new InternalError(`building image ${id} failed: ${(e.stderr ?? e.message).trim().split('\n').slice(-3).join(' | ')}`);
      }
    })().finally(() => { this.building = undefined; });
    return this.building;
  }
}
