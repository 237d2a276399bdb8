import { expect } from 'chai';
import type { Socket } from 'node:net';
import pty, { type IPty } from 'node-pty';
import {
  drainBeforeDestroy,
  HELD_TERMINAL_GRACE_MS,
  NodePtyFactory,
} from '../../../../src/adapters/agent/node-pty-factory.js';

/** Keeps this thread off the CPU's event loop, as a starved host does to the agent. */
const starve = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
const socketOf = (term: IPty) => (term as unknown as { _socket: Socket })._socket;

function collect(term: IPty) {
  const chunks: Buffer[] = [];
  term.onData((d: string | Buffer) => chunks.push(Buffer.from(d)));
  const exit = new Promise<number>((resolve) => term.onExit((e) => resolve(e.exitCode)));
  return { text: () => Buffer.concat(chunks).toString(), exit };
}

describe('adapters/agent/node-pty-factory', function () {
  this.timeout(10_000);

  it("keeps a shell's last output when node-pty's exit timer destroys the terminal before it was read", async () => {
    const term = pty.spawn('/bin/sh', ['-c', 'printf last-words; exit 3'], { encoding: null });
    drainBeforeDestroy(term);
    const out = collect(term);
    // the shell prints and exits while this loop gets no CPU; then the destroy that node-pty's
    // 200 ms timer makes comes before any read, as on a starved host
    starve(400);
    socketOf(term).destroy();
    expect(await out.exit).to.equal(3);
    expect(out.text()).to.equal('last-words');
  });

  it('gives a terminal still held open a grace before it destroys it', async () => {
    const term = pty.spawn('/bin/sh', ['-c', 'sleep 5'], { encoding: null });
    drainBeforeDestroy(term);
    const socket = socketOf(term);
    const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(Date.now())));
    const asked = Date.now();
    socket.destroy();
    expect(socket.destroyed).to.equal(false);
    const at = await closed;
    term.kill('SIGKILL');
    expect(at - asked).to.be.at.least(HELD_TERMINAL_GRACE_MS - 50);
  });

  it('ends a terminal held open at once when it ends in the grace, with what it printed', async () => {
    const term = pty.spawn('/bin/sh', ['-c', 'sleep 0.3; printf done'], { encoding: null });
    drainBeforeDestroy(term);
    const out = collect(term);
    const asked = Date.now();
    socketOf(term).destroy();
    expect(await out.exit).to.equal(0);
    expect(Date.now() - asked).to.be.below(HELD_TERMINAL_GRACE_MS - 200);
    expect(out.text()).to.equal('done');
  });

  it("answers a shell's output and exit status through the factory", async () => {
    const session = new NodePtyFactory().open({ shell: '/bin/sh', cols: 80, rows: 24 });
    const chunks: Buffer[] = [];
    session.onData((d) => chunks.push(d));
    const exit = new Promise<number>((resolve) => session.onExit(resolve));
    // the terminal echoes the line typed: only printf's output joins the two words
    session.write("printf '%s-%s' last line && exit 7\n");
    expect(await exit).to.equal(7);
    expect(Buffer.concat(chunks).toString()).to.include('last-line');
  });
});
