import { ensureFixture, ensureImage } from './image.js';

/**
 * Builds what the e2e tier boots before it starts (scripts/test.sh runs this beside the
 * integration tier): the minimal and debian images and the cloud disk fixture, each only when its
 * inputs changed. The e2e workers then find them built.
 */
const started = Date.now();
for (const kind of ['minimal', 'debian'] as const) ensureImage(kind);
ensureFixture('make-cloud-disk.sh', 'qcow2');
console.log(`e2e images and fixtures ready in ${((Date.now() - started) / 1000).toFixed(0)} s`);
