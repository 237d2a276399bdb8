#!/usr/bin/env node
// Builds what svc's code interpreter server takes into a guest beside its own files
// (src/adapters/code-interpreter): dist/code-interpreter/code-interpreter-ts.cjs, sucrase's
// `transform` in one file, which a TypeScript context's kernel strips each cell's types with.
import { build } from 'esbuild';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
await build({
  stdin: { contents: "module.exports = { transform: require('sucrase').transform };", resolveDir: root },
  bundle: true,
  platform: 'node',
  // the guest's node: an image's own, which may be older than the host's
  target: 'node18',
  format: 'cjs',
  outfile: join(root, 'dist', 'code-interpreter', 'code-interpreter-ts.cjs'),
  minify: true,
  legalComments: 'inline',
  logLevel: 'warning',
});
