import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { startTestDaemon, tempDir, type TestDaemon } from '../helpers/daemon.js';

const SVC = fileURLToPath(new URL('../../src/bin/svc.js', import.meta.url));
const DOC = fileURLToPath(new URL('../../../docs/getting-started.md', import.meta.url));

/** The commands of the doc's block marked `<!-- walked -->`, comments dropped. */
function walkedCommands(md: string): string[] {
  const block = /<!-- walked -->\s*```sh\n([\s\S]*?)```/.exec(md);
  if (!block) throw new Error('docs/getting-started.md has no walked block');
  return block[1]
    .split('\n')
    .map((l) => l.replace(/\s+#.*$/, '').trim())
    .filter(Boolean);
}

describe('docs/getting-started.md, walked (fake hypervisor, real local agents)', function () {
  this.timeout(120_000);
  let d: TestDaemon;
  before(async () => {
    d = await startTestDaemon({ fake_agent: true });
  });
  after(async () => {
    await d.stop();
    // With local agents the guest is this host: the doc's copy landed in its /tmp. Only that file goes.
    const { existsSync, readFileSync: read, rmSync } = await import('node:fs');
    if (existsSync('/tmp/hello.txt') && read('/tmp/hello.txt', 'utf8') === 'hello from the host\n')
      rmSync('/tmp/hello.txt');
  });

  it('runs every command of the walked block, in order, and each succeeds', async () => {
    const cwd = tempDir('getting-started-');
    const bin = tempDir('getting-started-bin-');
    // `svc` as the doc's reader has it after npm link.
    const { writeFileSync, chmodSync } = await import('node:fs');
    writeFileSync(`${bin}/svc`, `#!/bin/sh\nexec "${process.execPath}" "${SVC}" "$@"\n`);
    chmodSync(`${bin}/svc`, 0o755);
    const env = {
      PATH: `${bin}:${process.env.PATH}`,
      HOME: d.dir,
      SVC_SOCKET: d.config.socket,
      SVC_TOKEN: 'test-token',
    };
    const commands = walkedCommands(readFileSync(DOC, 'utf8'));
    expect(commands.length).to.be.greaterThan(5);
    const outputs: string[] = [];
    for (const c of commands) {
      const r = await new Promise<{ code: number; out: string }>((resolve) => {
        // stdin as a terminal's would be for these: nothing piped in (a pipe left open is input to svc x).
        const p = spawn('sh', ['-c', c], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        p.stdout.on('data', (b) => (out += b));
        p.stderr.on('data', (b) => (out += b));
        p.on('close', (code) => resolve({ code: code ?? -1, out }));
      });
      expect(r.code, `${c}\n${r.out}`).to.equal(0);
      outputs.push(r.out);
    }
    const all = outputs.join('\n');
    expect(all).to.contain('hello from the host');
    expect(all).to.contain('inside-42');
    expect(all).to.match(/^name +box$/m);
    expect((await d.call('GET', '/vms/box')).status, 'svc rm box removed it').to.equal(404);
  });
});
