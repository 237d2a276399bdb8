import { readFileSync } from 'node:fs';

/** The package version, read once from package.json (two levels up from dist/src or src). */
export const VERSION: string = (() => {
  if (process.env.SVC_BAKED_VERSION) return process.env.SVC_BAKED_VERSION;
  for (const rel of ['../../package.json', '../package.json']) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(rel, import.meta.url), 'utf8')) as {
        name?: string;
        version?: string;
      };
      if (pkg.name === 'svc' && pkg.version) return pkg.version;
    } catch {
      // try the next
    }
  }
  return '0.0.0';
})();
