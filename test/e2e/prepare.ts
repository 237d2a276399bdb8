import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ensureFixture, ensureImage } from './image.js';
import { ensureSeed, SEED_SHAPES } from './snapshot-seeds.js';

/**
 * Builds what the e2e tier boots before it starts (scripts/test.sh runs this beside the
 * integration tier): the minimal and debian images, the cloud disk fixture and the image snapshots
 * the e2e daemons restore their creates from, each only when its inputs changed. The e2e workers
 * then find them made.
 *
 * The three builds run side by side, each in a process of its own (`prepare.js minimal`, say): two
 * mmdebstraps wait on the archive and on dpkg's scripts as much as they compute, and on an idle
 * two-core host the debian image and the cloud disk took 164 s together against 238 s one after
 * the other. An image's seeds are captured as soon as it is built, while the others still build.
 * Beside the integration tier on two cores (CI) it gains nothing: both cores are busy either way
 * (test/README.md, the run of 2026-12-06 21:11).
 */
const TARGETS = {
  minimal: () => ensureImage('minimal'),
  debian: () => ensureImage('debian'),
  'cloud disk': () => ensureFixture('make-cloud-disk.sh', 'qcow2'),
};
type Target = keyof typeof TARGETS;

const started = Date.now();
const secs = (since: number) => `${((Date.now() - since) / 1000).toFixed(0)} s`;

const children = new Set<ChildProcess>();

/** Builds `target` in a child process; resolves with when it ended, rejects when it failed. */
function build(target: Target): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [fileURLToPath(import.meta.url), target], {
      stdio: ['ignore', 'inherit', 'inherit'],
      detached: true, // a group of its own, which a failure elsewhere ends whole (its bash and mmdebstrap too)
    });
    children.add(child);
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      children.delete(child);
      if (code === 0) resolve(`${target} ${secs(started)}`);
      else reject(new Error(`building ${target}: ${signal ?? code}`));
    });
  });
}

const one = process.argv[2];
if (one) {
  if (!(one in TARGETS)) throw new Error(`prepare: no target ${one} (${Object.keys(TARGETS).join(', ')})`);
  TARGETS[one as Target]();
} else {
  let seeds = 0;
  const seeded = (kind: 'minimal' | 'debian') => async (took: string) => {
    for (const shape of SEED_SHAPES.filter((s) => s.kind === kind)) {
      const t = Date.now();
      await ensureSeed(shape);
      seeds += Date.now() - t;
    }
    return took;
  };
  // Seeds take turns (snapshot-seeds.ts holds one lock), so the debian ones wait for the minimal.
  const minimal = build('minimal').then(seeded('minimal'));
  const debian = Promise.all([build('debian'), minimal]).then(([took]) => seeded('debian')(took));
  const ready = await Promise.all([minimal, debian, build('cloud disk')]).catch((err: Error) => {
    // A failed run leaves no build behind; a group that has ended meanwhile is no reason to hide `err`.
    for (const child of children) {
      try {
        process.kill(-child.pid!);
      } catch {
        // ESRCH: nothing of it is left
      }
    }
    throw err;
  });
  console.log(
    `e2e images and fixtures ready in ${secs(started)} (built at: ${ready.join(', ')}; snapshot seeds ${(seeds / 1000).toFixed(0)} s of it)`,
  );
}
process.exit(0); // a stopped daemon may leave a timer behind
