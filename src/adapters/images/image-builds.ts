import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { readdir, readFile, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { AlreadyExistsError, InternalError } from '../../domain/errors.js';
import type { ImageDetails, ImageProgress } from '../../ports/guest-images.js';
import { writeFileAtomic } from '../fs-kit/atomic-file.js';
import { childEnv } from '../process-kit/child-env.js';
import { alive } from '../process-kit/pid-alive.js';
import type { ImageManifest } from './image-manifest.js';
import { addBuild } from './older-builds.js';

const REPO = fileURLToPath(new URL('../../../../', import.meta.url));
export const BUILD_SCRIPT = join(REPO, 'image', 'build-image.sh');
export const AGENT_DIR = join(REPO, 'dist', 'agent');
const RECIPES_DIR = join(REPO, 'image');

/** Every file below `dir`, by name (in code-unit order: the same digest on every host, whatever its locale). */
function filesIn(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .flatMap((e) => (e.isDirectory() ? filesIn(join(dir, e.name)) : [join(dir, e.name)]));
}

/** The manifest of the image built in `dir`, if one is (an unreadable one counts as none). */
function builtManifest(dir: string): ImageManifest | undefined {
  try {
    return JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as ImageManifest;
  } catch {
    return undefined;
  }
}

let inputs: string | undefined;
/**
 * What this daemon builds its built-in images from: the digest of every file of image/ (the
 * recipes) and of the agent a guest gets (the bundle and its node_modules; not the single
 * executable, which only agent/deploy sends). A built image whose manifest names another was built
 * by another svc: its guests run the agent of then. Undefined when the agent is not built.
 */
export function builtinInputs(): string | undefined {
  if (inputs) return inputs;
  try {
    const h = createHash('sha256');
    const agent = [join(AGENT_DIR, 'svc-agent.cjs'), ...filesIn(join(AGENT_DIR, 'node_modules'))];
    for (const f of [...filesIn(RECIPES_DIR), ...agent])
      h.update(f.slice(REPO.length)).update('\0').update(readFileSync(f));
    return (inputs = `sha256:${h.digest('hex')}`);
  } catch {
    return undefined;
  }
}

/** The images the project builds itself from Debian packages, on first use. */
export const BUILTIN_IMAGES: Record<
  string,
  Pick<ImageDetails, 'os' | 'description' | 'min_disk_gb' | 'min_memory_mb'>
> = {
  debian: {
    os: "Debian GNU/Linux (the host's release)",
    description:
      'Debian with systemd, apt, python3 with pip, venv, numpy, pandas and matplotlib, git, curl, sudo and openssh-server; the default image',
    min_disk_gb: 2,
    min_memory_mb: 256,
  },
  minimal: {
    os: 'svc minimal (busybox)',
    description: 'The small image: busybox init, dropbear and the agent; the fastest boots',
    min_disk_gb: 1,
    min_memory_mb: 128,
  },
};

interface Build {
  done: Promise<void>;
  listeners: Set<(p: ImageProgress) => void>;
  last?: ImageProgress;
}

const TEMP_PREFIX = '.build-';
/** A temporary directory's name: its id, the maker's pid, when it began (an import's work folder: `.work` after). */
const TEMP_NAME = /^\.build-.+-(\d+)-\d+(?:\.work)?$/;

/**
 * The builds of the catalog's images that are under way: a built-in image built on first use
 * (image/build-image.sh), once even when several creates ask at the same time, each of them told
 * how far it is; and the ids an import or a bake is making, so that nothing else takes them meanwhile. A
 * build goes into a temporary directory that is renamed into place only when complete, so a failed
 * or interrupted one leaves no image a later create would boot. How long each took is kept, for the
 * next create's estimate.
 */
export class ImageBuilds {
  private readonly building = new Map<string, Build>();

  /**
   * `root` is the images' directory; `dir(id)` an image's own; `script` what builds a built-in
   * image (`script OUT_DIR AGENT_DIR ID`: image/build-image.sh; a test's stand-in).
   */
  constructor(
    private readonly root: string,
    private readonly dir: (id: string) => string,
    private readonly script = BUILD_SCRIPT,
  ) {}

  /**
   * A new temporary directory's path for making `id` in (a build, an import, a bake): beside the
   * images, renamed into place when complete. Its name carries this process's pid, so that `sweep`
   * can tell one a crashed daemon left.
   */
  tempDir(id: string): string {
    return join(this.root, `${TEMP_PREFIX}${id}-${process.pid}-${Date.now()}`);
  }

  /**
   * Removes the temporary directories of makers that are gone (a daemon killed during a build
   * leaves a half-built image of a gigabyte or more). Those of a live process are left alone.
   * Resolves with the names it removed.
   */
  async sweep(): Promise<string[]> {
    const gone: string[] = [];
    for (const name of await readdir(this.root).catch(() => [] as string[])) {
      const pid = TEMP_NAME.exec(name)?.[1];
      if (pid === undefined || alive(Number(pid))) continue;
      await rm(join(this.root, name), { recursive: true, force: true }).then(
        () => gone.push(name),
        () => undefined,
      );
    }
    return gone;
  }

  /** True while `id` is being built, imported or baked. */
  has(id: string): boolean {
    return this.building.has(id);
  }

  /**
   * Runs `make` with `id` marked as being made (an import, a bake), so that nothing else makes it
   * meanwhile: AlreadyExistsError when something is.
   */
  async holding<T>(id: string, make: () => Promise<T>): Promise<T> {
    if (this.building.has(id)) throw new AlreadyExistsError(`image ${id} is being made`);
    this.building.set(id, { done: Promise.resolve(), listeners: new Set() });
    try {
      return await make();
    } finally {
      this.building.delete(id);
    }
  }

  /**
   * Builds built-in image `id`, or joins its build under way; `progress` hears how far it is. A
   * built one is built again (the daemon's inputs changed since): the new one becomes the image
   * when complete, and the one it replaces is kept for the VMs that stand on it (older-builds.ts).
   */
  async ensure(id: string, progress?: (p: ImageProgress) => void): Promise<void> {
    let b = this.building.get(id);
    if (!b) {
      const entry: Build = { listeners: new Set(), done: Promise.resolve() };
      entry.done = this.build(id, (p) => {
        entry.last = p;
        for (const l of entry.listeners) l(p);
      }).finally(() => this.building.delete(id));
      this.building.set(id, entry);
      b = entry;
    }
    if (progress) {
      b.listeners.add(progress);
      if (b.last) progress(b.last);
    }
    try {
      await b.done;
    } finally {
      if (progress) b.listeners.delete(progress);
    }
  }

  /** How long the last build of `id` took here, in ms, if it was built here before. */
  estimate(id: string): number | undefined {
    return this.times()[id];
  }

  private async build(id: string, progress: (p: ImageProgress) => void): Promise<void> {
    if (!existsSync(join(AGENT_DIR, 'svc-agent.cjs'))) {
      throw new InternalError(`cannot build image ${id}: the agent is not built (npm run build:agent)`);
    }
    const tmp = this.tempDir(id);
    const t0 = Date.now();
    progress({ percent: 0, message: `building image ${id} from Debian packages` });
    try {
      await runBuild(['bash', this.script, tmp, AGENT_DIR, id], progress);
      await stampInputs(tmp);
      const current = builtManifest(this.dir(id));
      if (current) {
        // VMs may stand on the build it replaces: that one stays beside it (older-builds.ts).
        await addBuild(this.dir(id), tmp, current);
      } else {
        await rm(this.dir(id), { recursive: true, force: true });
        await rename(tmp, this.dir(id));
      }
      // What the next build of it (after an image rm, on this host) can be expected to take.
      await writeFileAtomic(this.timesFile(), JSON.stringify({ ...this.times(), [id]: Date.now() - t0 })).catch(
        () => undefined,
      );
      progress({ percent: 100, message: `image ${id} built` });
    } catch (err) {
      await rm(tmp, { recursive: true, force: true });
      throw err;
    }
  }

  private timesFile(): string {
    return join(this.root, '.build-times.json');
  }

  /** How long each built-in image's last build took here, in ms. */
  private times(): Record<string, number> {
    try {
      const t = JSON.parse(readFileSync(this.timesFile(), 'utf8')) as unknown;
      return typeof t === 'object' && t !== null && !Array.isArray(t) ? (t as Record<string, number>) : {};
    } catch {
      return {};
    }
  }
}

/** Writes what the image was built from into its manifest (`inputs_digest`, builtinInputs). */
async function stampInputs(dir: string): Promise<void> {
  const digest = builtinInputs();
  if (!digest) return;
  const path = join(dir, 'manifest.json');
  const m = JSON.parse(await readFile(path, 'utf8')) as Record<string, unknown>;
  await writeFileAtomic(path, `${JSON.stringify({ ...m, inputs_digest: digest }, null, 2)}\n`);
}

/** Runs a build, turning its `svc-progress N message` lines into progress; fails with its last lines. */
export function runBuild(
  argv: string[],
  progress: (p: ImageProgress) => void,
  env: Record<string, string> = {},
): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'ignore', 'pipe'], env: childEnv(env) });
    const tail: string[] = [];
    createInterface({ input: child.stderr! }).on('line', (line) => {
      const m = /^svc-progress (\d+) (.*)$/.exec(line);
      if (m) return progress({ percent: Number(m[1]), message: m[2] });
      tail.push(line);
      if (tail.length > 5) tail.shift();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 1_800_000);
    child.once('error', (err) => reject(new InternalError(`image build could not start: ${err.message}`)));
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(new InternalError(`image build failed (${signal ?? `exit ${code}`}): ${tail.join(' | ')}`));
    });
  });
}
