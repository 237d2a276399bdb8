import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { cpSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { call } from '../helpers/http.js';
import { tempDir } from '../helpers/daemon.js';
import { openShell } from '../helpers/ws-shell.js';

const artifactDir = fileURLToPath(new URL('../../agent/', import.meta.url));

/** Runs an artifact copied alone into a temp directory (so it cannot lean on the repo's node_modules). */
async function runCopied(file: string, viaNode: boolean): Promise<{ port: number; stderr(): string; stop(): void }> {
  const dir = tempDir('svc-artifact-');
  cpSync(artifactDir, dir, { recursive: true });
  const exe = join(dir, file);
  const args = [
    '--listen',
    '127.0.0.1:0',
    '--vsock-port',
    '0',
    '--state-dir',
    join(dir, 'state'),
    '--run-dir',
    join(dir, 'run'),
  ];
  const child = viaNode ? spawn(process.execPath, [exe, ...args], { cwd: '/' }) : spawn(exe, args, { cwd: '/' });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout }).once('line', resolve);
    child.once('exit', (c) => reject(new Error(`exited ${c}`)));
  });
  return {
    port: Number((JSON.parse(line) as { listening: string }).listening.split(':')[1]),
    stderr: () => stderr,
    stop: () => child.kill('SIGKILL'),
  };
}

describe('agent artifact (npm run build:agent)', function () {
  this.timeout(30000);
  for (const [file, viaNode] of [
    ['svc-agent.cjs', true],
    ['svc-agent', false],
  ] as const) {
    it(`${file} runs on its own: health, exec and a PTY shell`, async function () {
      if (!existsSync(join(artifactDir, file))) throw new Error(`${file} missing: run npm run build:agent`);
      const a = await runCopied(file, viaNode);
      try {
        const h = await call({ port: a.port }, 'GET', '/health');
        expect(h.json.agent_version).to.match(/^\d+\.\d+\.\d+/);
        expect((await call({ port: a.port }, 'POST', '/exec?cmd=echo&args=hi')).json.stdout).to.equal('hi\n');
        const sh = await openShell(`ws://127.0.0.1:${a.port}/shell?shell=/bin/sh`);
        sh.send('echo $((6*7))\n');
        await sh.waitFor(/42/);
        sh.ws.close();
        // Node's warnings (a single executable asked for a module it cannot load, say) go to the
        // guest's journal at every start: there are none.
        expect(a.stderr()).not.to.match(/\(node:\d+\) \w*Warning/);
      } finally {
        a.stop();
      }
    });
  }
});
