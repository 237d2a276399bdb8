import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { hostname } from 'node:os';
import { fileURLToPath } from 'node:url';
import { loadSysCalls } from '../../../../src/adapters/agent/sys-calls.js';

// Built by `npm run build:agent` (scripts/build-agent.mjs), which the test command runs first.
const ADDON = fileURLToPath(new URL('../../../../agent/node_modules/svc-sys/', import.meta.url));

/** Runs `code` in a Node of its own, as nobody when the tests run as root, and answers what it printed. */
function unprivileged(code: string): string {
  const asRoot = process.getuid?.() === 0;
  const r = spawnSync(process.execPath, ['-e', code], {
    encoding: 'utf8',
    ...(asRoot ? { uid: 65534, gid: 65534 } : {}),
  });
  expect(r.status, r.stderr).to.equal(0);
  return r.stdout.trim();
}

describe('adapters/agent/sys-calls (the svc-sys addon)', () => {
  it('is built beside the agent bundle, and loads', () => {
    expect(existsSync(`${ADDON}svc-sys.node`), 'dist/agent/node_modules/svc-sys/svc-sys.node').to.equal(true);
    const sys = loadSysCalls(ADDON);
    expect(sys).to.not.equal(null);
    expect(sys!.hostname()).to.equal(hostname());
  });

  it('answers null where there is no addon', () => {
    expect(loadSysCalls('/nonexistent/svc-sys')).to.equal(null);
    expect(loadSysCalls('svc-sys'), "not in the checkout's node_modules").to.equal(null);
  });

  it('refuses what is not a time or a hostname before any system call', () => {
    const sys = loadSysCalls(ADDON)!;
    for (const bad of [Number.NaN, -1, 1e300, 'soon' as unknown as number]) {
      expect(() => sys.setTime(bad), String(bad))
        .to.throw(TypeError, /milliseconds since the epoch/)
        .with.property('code', 'EINVAL');
    }
    for (const bad of ['', 'x'.repeat(64), 7 as unknown as string]) {
      expect(() => sys.setHostname(bad), String(bad))
        .to.throw(TypeError, /1 to 63 bytes/)
        .with.property('code', 'EINVAL');
    }
  });

  it('throws the errno of a refused call, by name and with its message', () => {
    const said = unprivileged(`
      const sys = require(${JSON.stringify(ADDON)});
      const out = [];
      for (const f of [() => sys.setTime(Date.now()), () => sys.setHostname('not-allowed')]) {
        try { f(); out.push('no error'); } catch (e) { out.push(e.code + ' ' + e.message); }
      }
      console.log(out.join('|'));`);
    expect(said.split('|')).to.deep.equal([
      'EPERM settimeofday: Operation not permitted',
      'EPERM sethostname: Operation not permitted',
    ]);
  });
});
