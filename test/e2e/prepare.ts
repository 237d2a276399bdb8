import { ensureFixture, ensureImage } from './image.js';
import { ensureSeed, SEED_SHAPES } from './snapshot-seeds.js';

/**
 * Builds what the e2e tier boots before it starts (scripts/test.sh runs this beside the
 * integration tier): the minimal and debian images, the cloud disk fixture and the image snapshots
 * the e2e daemons restore their creates from, each only when its inputs changed. The e2e workers
 * then find them made.
 */
const started = Date.now();
for (const kind of ['minimal', 'debian'] as const) ensureImage(kind);
ensureFixture('make-cloud-disk.sh', 'qcow2');
const built = Date.now();
for (const shape of SEED_SHAPES) await ensureSeed(shape);
console.log(
  `e2e images and fixtures ready in ${((built - started) / 1000).toFixed(0)} s, snapshot seeds in ${((Date.now() - built) / 1000).toFixed(0)} s`,
);
process.exit(0); // a stopped daemon may leave a timer behind
