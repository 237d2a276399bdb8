import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { SVC } from '../../../helpers/svc-cli.js';

/**
 * The CLI starts for every command a person or a script types: it reads the config file with the
 * drivers' sections (driver-sections.ts), not the drivers, so it loads no hypervisor, no
 * dependency injection, no HTTP server and no SSH library (half its start time went to them); and
 * what only some commands need is loaded by them: YAML's parser when there is a file to read (a
 * config, a recipe), ws for a terminal, tar-stream for a copy of a tree (together 85 of 280 ms).
 */
describe('svc CLI: what it loads to start', function () {
  this.timeout(20_000); // a node start, which a busy host slows; nothing here is timed
  it('loads the client and commander, none of the daemon, and no yaml, ws or tar-stream', () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-cli-load-'));
    try {
      // A module hook that prints every module resolved (module.register, node 20.6 and later).
      writeFileSync(
        join(dir, 'hooks.mjs'),
        "export async function resolve(s, c, next) { const r = await next(s, c); process.stderr.write('LOADED ' + r.url + '\\n'); return r; }\n",
      );
      writeFileSync(
        join(dir, 'register.mjs'),
        `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(join(dir, 'hooks.mjs')).href)});\n`,
      );
      // No config file where it looks (a HOME of its own), as on a machine where only the CLI is used.
      const env = { ...process.env, HOME: dir, SVC_CONFIG: '' };
      const r = spawnSync(process.execPath, ['--import', join(dir, 'register.mjs'), SVC, 'ls', '--help'], {
        encoding: 'utf8',
        env,
      });
      expect(r.status, r.stderr).to.equal(0);
      const loaded = [...new Set(r.stderr.split('\n').filter((l) => l.startsWith('LOADED ')))].map((l) => l.slice(7));
      const has = (part: string) => loaded.some((u) => u.includes(part));
      for (const part of ['/node_modules/commander/', '/adapters/client/svc-client.js'])
        expect(has(part), `${part} in:\n${loaded.join('\n')}`).to.equal(true);
      for (const part of [
        '/node_modules/inversify/',
        '/node_modules/@inversifyjs/',
        '/node_modules/express/',
        '/node_modules/ssh2/',
        '/node_modules/prom-client/',
        '/node_modules/yaml/',
        '/node_modules/ws/',
        '/node_modules/tar-stream/',
        '/adapters/hypervisor/qemu/qemu-hypervisor.js',
        '/adapters/hypervisor/fake/in-memory-hypervisor.js',
        '/app/',
      ])
        expect(
          // the config's reader and its parts (config-shape, config-sections) are the CLI's too
          loaded.filter((u) => u.includes(part) && !/\/app\/config(-[a-z]+)?\.js$/.test(u)),
          part,
        ).to.deep.equal([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
