import { expect } from 'chai';
import type { Sandbox } from 'e2b';
import { poll } from './wait.js';

/**
 * Opens an E2B terminal of 100x30 (in `cwd` when given), checks `stty size` before and after a
 * resize to 120x40, and that it ends with the shell's exit code 0.
 */
export async function expectPtyFollowsResize(s: Sandbox, cwd?: string): Promise<void> {
  let seen = '';
  const t = await s.pty.create({ cols: 100, rows: 30, onData: (d) => void (seen += Buffer.from(d).toString()), cwd });
  const until = async (re: RegExp) => {
    await poll(() => re.test(seen), { ms: 15_000, every: 100 });
    expect(seen).to.match(re);
  };
  await s.pty.sendInput(t.pid, new TextEncoder().encode('stty size\n'));
  await until(/30 100/);
  await s.pty.resize(t.pid, { cols: 120, rows: 40 });
  await s.pty.sendInput(t.pid, new TextEncoder().encode('stty size; exit 0\n'));
  await until(/40 120/);
  expect((await t.wait()).exitCode).to.equal(0);
}
