import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeProcessRunner } from '../../../../src/adapters/agent/node-process-runner.js';
import { SpawnError } from '../../../../src/ports/agent/process-runner.js';

describe('adapters/agent/NodeProcessRunner', () => {
  it("keeps a command's output when a background child it started holds the pipes past its exit", async () => {
    const runner = new NodeProcessRunner();
    const p = await runner.spawn({
      cmd: 'sh',
      args: ['-c', 'echo out; echo err >&2; sleep 3 >/dev/null 2>&1 <&- & exit 4'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    p.stdout.on('data', (c: Buffer) => out.push(c));
    p.stderr.on('data', (c: Buffer) => err.push(c));
    const t0 = Date.now();
    // The grandchild holds copies of the pipes: the exit is let go after the grace, not after it.
    const p2 = await runner.spawn({ cmd: 'sh', args: ['-c', 'echo held; sleep 3 & exit 0'] });
    const held: Buffer[] = [];
    p2.stdout.on('data', (c: Buffer) => held.push(c));
    const [e1, e2] = await Promise.all([p.exited, p2.exited]);
    expect(Date.now() - t0).to.be.below(2500);
    expect(e1.code).to.equal(4);
    expect(Buffer.concat(out).toString()).to.equal('out\n');
    expect(Buffer.concat(err).toString()).to.equal('err\n');
    expect(e2.code).to.equal(0);
    expect(Buffer.concat(held).toString()).to.equal('held\n');
    p2.kill();
  });

  it('starts in the home it is given when that is a directory, else in /; a cwd given wins, and must be one', async () => {
    const runner = new NodeProcessRunner();
    const home = mkdtempSync(join(tmpdir(), 'svc-home-'));
    const pwd = async (req: { cwd?: string; home?: string }) => {
      const p = await runner.spawn({ cmd: 'pwd', args: [], ...req });
      const out: Buffer[] = [];
      p.stdout.on('data', (c: Buffer) => out.push(c));
      await p.exited;
      return Buffer.concat(out).toString().trim();
    };
    try {
      expect(await pwd({ home })).to.equal(home);
      expect(await pwd({ home: join(home, 'missing') })).to.equal('/');
      expect(await pwd({ home, cwd: tmpdir() })).to.equal(tmpdir());
      const err = await runner.spawn({ cmd: 'pwd', args: [], cwd: join(home, 'missing') }).catch((e: Error) => e);
      expect(err)
        .to.be.instanceOf(SpawnError)
        .with.property('message')
        .that.matches(/is not a directory/);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});
