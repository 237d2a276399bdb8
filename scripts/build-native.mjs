// Builds the daemon's native helpers into dist/native/ (npm run build). Optional: without a C
// compiler the daemon runs without them (a download then passes through Node, docs/benchmarks.md;
// a running VM cannot be forked, docs/forks.md).
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';

const cc = process.env.CC || 'cc';
mkdirSync('dist/native', { recursive: true });
// What the daemon does without each: copies go through Node; running VMs cannot be forked.
const helpers = {
  'svc-splice': 'copies go through Node instead',
  'svc-fdpass': 'running vms cannot be forked',
};
for (const [name, without] of Object.entries(helpers)) {
  const r = spawnSync(cc, ['-O2', '-Wall', '-Wextra', '-o', `dist/native/${name}`, `native/${name}.c`], {
    stdio: 'inherit',
  });
  if (r.error || r.status !== 0) {
    console.warn(
      `build-native: ${cc} could not build native/${name}.c (${r.error?.message ?? `exit ${r.status}`}); ${without}`,
    );
  }
}
