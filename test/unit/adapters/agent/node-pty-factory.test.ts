import { expect } from 'chai';
import type { Socket } from 'node:net';
import pty, { type IPty } from 'node-pty';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { NotFoundError } from '../../../../src/domain/errors.js';
import { tempDir } from '../../../helpers/daemon.js';
import {
  drainBeforeDestroy,
  findProgram,
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

  it('runs a command with its arguments in the terminal, found in PATH, in its cwd with its env', async () => {
    const dir = tempDir('svc-pty-cmd-');
    const session = new NodePtyFactory().open({
      shell: 'sh',
      args: ['-c', 'printf "%s|%s|" "$(pwd)" "$GREETING"; test -t 0 && printf tty; exit 5', 'x y'],
      cols: 80,
      rows: 24,
      cwd: dir,
      env: { GREETING: 'hi there' },
    });
    const chunks: Buffer[] = [];
    session.onData((d) => chunks.push(d));
    expect(await new Promise<number>((resolve) => session.onExit(resolve))).to.equal(5);
    expect(Buffer.concat(chunks).toString()).to.equal(`${dir}|hi there|tty`);
  });

  it('says a program or a directory that is not there before any terminal is made', () => {
    const dir = tempDir('svc-pty-find-');
    mkdirSync(join(dir, 'bin'));
    writeFileSync(join(dir, 'bin', 'tool'), '#!/bin/sh\n');
    writeFileSync(join(dir, 'bin', 'data'), 'not a program');
    chmodSync(join(dir, 'bin', 'tool'), 0o755);
    mkdirSync(join(dir, 'bin', 'sub'));
    const path = `/nonexistent:${join(dir, 'bin')}`;
    expect(findProgram('tool', path, '/')).to.equal(join(dir, 'bin', 'tool'));
    expect(findProgram('./bin/tool', undefined, dir)).to.equal('./bin/tool');
    expect(findProgram('sh', undefined, '/')).to.match(/\/sh$/);
    for (const [file, message] of [
      ['data', "no command data in the guest's PATH"],
      ['sub', "no command sub in the guest's PATH"],
      ['no-such-tool', "no command no-such-tool in the guest's PATH"],
      ['/no/such/program', 'no program /no/such/program in the guest'],
    ])
      expect(() => findProgram(file, path, '/'), file)
        .to.throw(NotFoundError)
        .with.property('message', message);
    const pty = new NodePtyFactory();
    expect(() => pty.open({ shell: 'no-such-tool', cols: 80, rows: 24 })).to.throw(NotFoundError);
    expect(() => pty.open({ shell: '/bin/sh', cols: 80, rows: 24, cwd: join(dir, 'gone') }))
      .to.throw(NotFoundError)
      .with.property('message', `no directory ${join(dir, 'gone')} in the guest`);
  });

  it("starts in a user's home, or in / when the home is not there (as a login does)", async () => {
    const dir = tempDir('svc-pty-home-');
    const pwd = async (home: string) => {
      const session = new NodePtyFactory().open({ shell: 'pwd', cols: 80, rows: 24, home });
      const chunks: Buffer[] = [];
      session.onData((d) => chunks.push(d));
      await new Promise<number>((resolve) => session.onExit(resolve));
      return Buffer.concat(chunks).toString().trim();
    };
    expect(await pwd(dir)).to.equal(dir);
    expect(await pwd(join(dir, 'nonexistent'))).to.equal('/');
  });
});
