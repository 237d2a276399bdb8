#!/usr/bin/env node
// Builds the guest agent as a single deployable artifact (docs/agent.md):
//   dist/agent/svc-agent.cjs   one bundled script for guests that have node
//   dist/agent/svc-agent       a Node single executable application for guests without
//   dist/agent/node_modules/node-pty/   the PTY addon both load from beside themselves
//   dist/agent/node_modules/svc-sys/    the identity's system calls (native/svc-sys.c), when a C
//                                       compiler and Node's headers are at hand
//   dist/agent/node_modules/svc-bin/    svc-keep and svc-watch, the durable processes' keeper and
//                                       the file watch (native/, static)
import { build } from 'esbuild';
import { cpSync, copyFileSync, chmodSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { execFileSync, spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'dist', 'agent');
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const version = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version;

const bundled = await build({
  entryPoints: [join(root, 'src', 'bin', 'svc-agent.ts')],
  metafile: true,
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'cjs',
  outfile: join(out, 'svc-agent.cjs'),
  external: ['node-pty'],
  minify: false,
  sourcemap: false,
  legalComments: 'none',
  // version.ts reads package.json relative to import.meta.url; in the bundle the version is baked in.
  // ws's optional native helpers are not shipped: ws is told so (node's own isUtf8 and its JS masking
  // serve), rather than asking for them at each start, which a single executable warns about.
  define: {
    'import.meta.url': '__svcImportMetaUrl',
    'process.env.SVC_BAKED_VERSION': JSON.stringify(version),
    'process.env.WS_NO_BUFFER_UTIL': '"1"',
    'process.env.WS_NO_UTF_8_VALIDATE': '"1"',
  },
  banner: {
    js: [
      'const __svcImportMetaUrl = require("node:url").pathToFileURL(__filename).href;',
      // Inside a single executable only built-ins can be required; load the addon from beside the binary.
      'const __svcRequire = (() => { try { if (require("node:sea").isSea()) return require("node:module").createRequire(process.execPath); } catch {} return require; })();',
    ].join('\n'),
  },
});
// The guest agent serves no metrics: a module of the daemon's that pulls prom-client into the agent
// costs every guest its load at each start (http-kit/request-metrics.ts is kept apart for this).
const daemonOnly = Object.keys(bundled.metafile.inputs).filter((f) =>
  /node_modules\/(prom-client|@opentelemetry)\//.test(f),
);
if (daemonOnly.length) {
  console.error(`build-agent: the agent bundle would carry the daemon's metrics: ${daemonOnly.slice(0, 3).join(', ')}`);
  process.exit(1);
}
const bundlePath = join(out, 'svc-agent.cjs');
writeFileSync(
  bundlePath,
  readFileSync(bundlePath, 'utf8').replaceAll('require("node-pty")', '__svcRequire("node-pty")'),
);
chmodSync(bundlePath, 0o755);

// The PTY addon: its JS and the compiled .node, nothing else.
const pty = join(root, 'node_modules', 'node-pty');
const ptyOut = join(out, 'node_modules', 'node-pty');
mkdirSync(join(ptyOut, 'build', 'Release'), { recursive: true });
cpSync(join(pty, 'lib'), join(ptyOut, 'lib'), {
  recursive: true,
  filter: (p) => !p.includes('.test.') && !p.endsWith('.map'),
});
copyFileSync(join(pty, 'package.json'), join(ptyOut, 'package.json'));
copyFileSync(join(pty, 'build', 'Release', 'pty.node'), join(ptyOut, 'build', 'Release', 'pty.node'));

// The identity's addon, built against the headers of the Node that runs this script (the Node the
// guests get). Optional: without it the agent sets the clock with `date` (docs/agent.md).
const sysOut = join(out, 'node_modules', 'svc-sys');
const include = process.env.SVC_NODE_INCLUDE || join(dirname(process.execPath), '..', 'include', 'node');
mkdirSync(sysOut, { recursive: true });
const cc = spawnSync(
  process.env.CC || 'cc',
  [
    '-O2',
    '-Wall',
    '-Wextra',
    '-shared',
    '-fPIC',
    '-I',
    include,
    '-o',
    join(sysOut, 'svc-sys.node'),
    join(root, 'native', 'svc-sys.c'),
  ],
  { stdio: 'inherit' },
);
if (cc.error || cc.status !== 0) {
  rmSync(sysOut, { recursive: true, force: true });
  console.warn(
    `build-agent: native/svc-sys.c not built (${cc.error?.message ?? `exit ${cc.status}`}; headers looked for in ${include}); the agent sets the clock with date`,
  );
} else {
  writeFileSync(
    join(sysOut, 'package.json'),
    `${JSON.stringify({ name: 'svc-sys', private: true, main: 'svc-sys.node' })}\n`,
  );
}

// The durable processes' keeper and the file watch (native/svc-keep.c, native/svc-watch.c;
// docs/processes.md), and the start as a user with supplementary groups (native/svc-as.c), linked
// static so they run in any guest the agent runs in (an OCI image's libc is not the host's).
// Without the first two the agent answers 501 to processes and watches; without svc-as, commands
// and shells as a user run without the user's supplementary groups.
const binOut = join(out, 'node_modules', 'svc-bin');
mkdirSync(binOut, { recursive: true });
writeFileSync(join(binOut, 'package.json'), `${JSON.stringify({ name: 'svc-bin', private: true })}\n`);
for (const name of ['svc-keep', 'svc-watch', 'svc-as']) {
  const r = spawnSync(
    process.env.CC || 'cc',
    ['-O2', '-Wall', '-Wextra', '-static', '-s', '-o', join(binOut, name), join(root, 'native', `${name}.c`)],
    { stdio: 'inherit' },
  );
  if (r.error || r.status !== 0) {
    console.warn(
      `build-agent: native/${name}.c not built (${r.error?.message ?? `exit ${r.status}`}); ${name === 'svc-as' ? "commands as a user run without the user's supplementary groups" : 'the agent has no durable processes or watches'}`,
    );
  }
}

// Single executable application (Node 20: --experimental-sea-config + postject).
if (process.env.SVC_SKIP_SEA !== '1') {
  const seaConfig = join(out, 'sea-config.json');
  writeFileSync(
    seaConfig,
    JSON.stringify({ main: bundlePath, output: join(out, 'sea-prep.blob'), disableExperimentalSEAWarning: true }),
  );
  execFileSync(process.execPath, ['--experimental-sea-config', seaConfig], { stdio: ['ignore', 'ignore', 'inherit'] });
  const exe = join(out, 'svc-agent');
  copyFileSync(process.execPath, exe);
  chmodSync(exe, 0o755);
  // Without the debug symbols a node build may carry (12 of its 99 MB here), as the images' node
  // is: less for agent deploy to send a guest. The blob goes in after; a host without strip skips it.
  spawnSync('strip', ['--strip-unneeded', exe], { stdio: 'ignore' });
  execFileSync(
    process.execPath,
    [
      join(root, 'node_modules', 'postject', 'dist', 'cli.js'),
      exe,
      'NODE_SEA_BLOB',
      join(out, 'sea-prep.blob'),
      '--sentinel-fuse',
      'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2',
    ],
    { stdio: 'pipe' },
  ); // its section warnings are noise; a failure throws with them
  rmSync(join(out, 'sea-prep.blob'));
  rmSync(seaConfig);
}
console.log(`built ${out}`);
