#!/usr/bin/env node
// Builds the guest agent as a single deployable artifact (docs/agent.md):
//   dist/agent/svc-agent.cjs   one bundled script for guests that have node
//   dist/agent/svc-agent       a Node single executable application for guests without
//   dist/agent/node_modules/node-pty/   the PTY addon both load from beside themselves
import { build } from 'esbuild';
import { cpSync, copyFileSync, chmodSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'dist', 'agent');
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const version = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version;

await build({
  entryPoints: [join(root, 'src', 'bin', 'svc-agent.ts')],
  bundle: true, platform: 'node', target: 'node20', format: 'cjs', outfile: join(out, 'svc-agent.cjs'),
  external: ['node-pty'], minify: false, sourcemap: false, legalComments: 'none',
  // version.ts reads package.json relative to import.meta.url; in the bundle the version is baked in.
  define: { 'import.meta.url': '__svcImportMetaUrl', 'process.env.SVC_BAKED_VERSION': JSON.stringify(version) },
  banner: { js: [
    'const __svcImportMetaUrl = require("node:url").pathToFileURL(__filename).href;',
    // Inside a single executable only built-ins can be required; load the addon from beside the binary.
    'const __svcRequire = (() => { try { if (require("node:sea").isSea()) return require("node:module").createRequire(process.execPath); } catch {} return require; })();',
  ].join('\n') },
});
const bundlePath = join(out, 'svc-agent.cjs');
writeFileSync(bundlePath, readFileSync(bundlePath, 'utf8').replaceAll('require("node-pty")', '__svcRequire("node-pty")'));
chmodSync(bundlePath, 0o755);

// The PTY addon: its JS and the compiled .node, nothing else.
const pty = join(root, 'node_modules', 'node-pty');
const ptyOut = join(out, 'node_modules', 'node-pty');
mkdirSync(join(ptyOut, 'build', 'Release'), { recursive: true });
cpSync(join(pty, 'lib'), join(ptyOut, 'lib'), { recursive: true, filter: (p) => !p.includes('.test.') && !p.endsWith('.map') });
copyFileSync(join(pty, 'package.json'), join(ptyOut, 'package.json'));
copyFileSync(join(pty, 'build', 'Release', 'pty.node'), join(ptyOut, 'build', 'Release', 'pty.node'));

// Single executable application (Node 20: --experimental-sea-config + postject).
if (process.env.SVC_SKIP_SEA !== '1') {
  const seaConfig = join(out, 'sea-config.json');
  writeFileSync(seaConfig, JSON.stringify({ main: bundlePath, output: join(out, 'sea-prep.blob'), disableExperimentalSEAWarning: true }));
  execFileSync(process.execPath, ['--experimental-sea-config', seaConfig], { stdio: ['ignore', 'ignore', 'inherit'] });
  const exe = join(out, 'svc-agent');
  copyFileSync(process.execPath, exe);
  chmodSync(exe, 0o755);
  execFileSync(process.execPath, [join(root, 'node_modules', 'postject', 'dist', 'cli.js'), exe, 'NODE_SEA_BLOB', join(out, 'sea-prep.blob'),
    '--sentinel-fuse', 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2'], { stdio: 'pipe' }); // its section warnings are noise; a failure throws with them
  rmSync(join(out, 'sea-prep.blob'));
  rmSync(seaConfig);
}
console.log(`built ${out}`);
