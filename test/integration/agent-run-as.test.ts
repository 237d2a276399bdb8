import { expect } from 'chai';
import { NodeProcessRunner } from '../../src/adapters/agent/node-process-runner.js';
import { NodePtyFactory } from '../../src/adapters/agent/node-pty-factory.js';
import { findRunAs } from '../../src/adapters/agent/run-as.js';
import { SpawnError } from '../../src/ports/agent/process-runner.js';

/**
 * A command and a terminal as a user keep the user's supplementary groups (native/svc-as, built by
 * npm run build:agent): libuv clears them when it sets a child's uid. As `nobody` with two groups
 * the host has (video, plugdev: any numbers do), nothing of the host's is touched.
 */
describe('agent: commands and terminals as a user with supplementary groups (svc-as)', function () {
  const who = { uid: 65534, gid: 65534, groups: [65534, 44, 46] };

  before(function () {
    if (process.getuid?.() !== 0) this.skip(); // setgroups needs root; CI runs as root
    expect(findRunAs(), 'dist/agent/node_modules/svc-bin/svc-as (npm run build:agent)').to.be.a('string');
  });

  it('runs a command with them, and says a missing program as before', async () => {
    const runner = new NodeProcessRunner(findRunAs());
    const p = await runner.spawn({ cmd: 'id', args: ['-G'], ...who });
    const out: Buffer[] = [];
    p.stdout.on('data', (c: Buffer) => out.push(c));
    expect((await p.exited).code).to.equal(0);
    expect(Buffer.concat(out).toString().trim()).to.equal('65534 44 46');
    const missing = await runner.spawn({ cmd: 'no-such-program-svc', args: [], ...who }).catch((e: Error) => e);
    expect(missing)
      .to.be.instanceOf(SpawnError)
      .with.property('message')
      .that.matches(/no command no-such-program-svc/);
    // without svc-as (an agent built without a C compiler) the command runs, without them
    const plain = await new NodeProcessRunner(null).spawn({ cmd: 'id', args: ['-G'], ...who });
    const plainOut: Buffer[] = [];
    plain.stdout.on('data', (c: Buffer) => plainOut.push(c));
    await plain.exited;
    expect(Buffer.concat(plainOut).toString().trim()).to.equal('65534');
  });

  it('opens a terminal with them', async () => {
    const term = new NodePtyFactory(findRunAs()).open({ shell: 'id', args: ['-G'], cols: 80, rows: 24, ...who });
    const out: Buffer[] = [];
    term.onData((d) => out.push(d));
    const code = await new Promise<number>((resolve) => term.onExit(resolve));
    expect(code).to.equal(0);
    await new Promise((r) => setTimeout(r, 100));
    expect(Buffer.concat(out).toString().trim()).to.equal('65534 44 46');
  });
});
