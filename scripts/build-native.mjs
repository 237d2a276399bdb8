// Builds the daemon's native helpers into dist/native/ (npm run build). Optional: without a C
// compiler the daemon runs without them (a download then passes through Node; docs/benchmarks.md).
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';

const cc = process.env.CC || 'cc';
mkdirSync('dist/native', { recursive: true });
const r = spawnSync(cc, ['-O2', '-Wall', '-Wextra', '-o', 'dist/native/svc-splice', 'native/svc-splice.c'], {
  stdio: 'inherit',
});
if (r.error || r.status !== 0) {
  console.warn(
    `build-native: ${cc} could not build native/svc-splice.c (${r.error?.message ?? `exit ${r.status}`}); copies go through Node instead`,
  );
}
