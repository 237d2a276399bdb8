#!/usr/bin/env node
// Builds the web dashboard (docs/dashboard.md) into dist/ui: index.html, app.js and app.css.
// preact + htm for the pages, xterm.js for the terminal, uPlot for the chart, bundled by esbuild.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'dist', 'ui');
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { app: join(root, 'ui', 'src', 'main.ts') },
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: ['chrome110', 'firefox110', 'safari16'],
  outdir: out,
  minify: true,
  sourcemap: false,
  legalComments: 'none',
  logLevel: 'warning',
});
copyFileSync(join(root, 'ui', 'index.html'), join(out, 'index.html'));
