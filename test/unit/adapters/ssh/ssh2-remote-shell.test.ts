import { expect } from 'chai';
import fc from 'fast-check';
import { Readable } from 'node:stream';
import { connect } from 'node:net';
import { Ssh2RemoteShell } from '../../../../src/adapters/ssh/ssh2-remote-shell.js';
import { Ssh2Tunnels } from '../../../../src/adapters/ssh/ssh2-tunnels.js';
import {
  AgentFailureError,
  AgentUnavailableError,
  DeadlineExceededError,
  isDomainError,
} from '../../../../src/domain/errors.js';
import type { SshTarget } from '../../../../src/ports/tunnels.js';
import { daemonConnections, SshPeer } from '../../../helpers/ssh-peer.js';
import { waitUntil } from '../../../helpers/wait.js';

const until = (what: string, ok: () => boolean, ms = 3000) => waitUntil(what, ok, { ms, every: 20 });

/** Writes `chunk` to the channel until it closes, waiting for the window like a real guest would. */
function flood(stream: NodeJS.WritableStream & { destroyed?: boolean }, chunk: Buffer): void {
  const more = () => {
    while (!stream.destroyed) if (!stream.write(chunk)) return void stream.once('drain', more);
  };
  more();
}

describe('adapters/ssh/Ssh2RemoteShell against a guest that is not trusted', function () {
  this.timeout(20_000);
  let peer: SshPeer;
  let target: SshTarget;
  let shell: Ssh2RemoteShell;

  beforeEach(async () => {
    peer = new SshPeer();
    target = await peer.listen();
    shell = new Ssh2RemoteShell(daemonConnections());
  });
  afterEach(() => peer.close());

  it('runs a command: its stdin in, output and exit code out', async () => {
    peer.behaviour = (s, cmd) => {
      const got: Buffer[] = [];
      s.on('data', (d: Buffer) => got.push(d));
      s.on('end', () => {
        s.write(`${cmd}:${Buffer.concat(got).toString()}`);
        s.stderr.write('warn');
        s.exit(3);
        s.end();
      });
    };
    const r = await shell.exec(target, 'cat', { stdin: Readable.from([Buffer.from('a'), Buffer.from('b')]) });
    expect(r).to.deep.equal({ code: 3, stdout: 'cat:ab', stderr: 'warn' });
  });

  it('ends a command that floods stdout at the cap, with a clear error; the daemon keeps no more than the cap', async () => {
    peer.behaviour = (s) => flood(s, Buffer.alloc(64 * 1024, 'x'));
    const heap = process.memoryUsage().arrayBuffers;
    const err = await shell.exec(target, 'yes', { maxOutputBytes: 2 * 1024 * 1024 }).catch((e) => e);
    expect(err).to.be.instanceOf(AgentFailureError);
    expect(err.message).to.match(/stdout passed 2097152 bytes; ended/);
    expect(process.memoryUsage().arrayBuffers - heap).to.be.below(64 * 1024 * 1024);
    await until('the connection to close', () => peer.connections === 0);
  });

  it('ends a command that floods stderr the same way', async () => {
    peer.behaviour = (s) => flood(s.stderr, Buffer.alloc(16 * 1024, 'e'));
    const err = await shell.exec(target, 'x', { maxOutputBytes: 100_000 }).catch((e) => e);
    expect(err).to.be.instanceOf(AgentFailureError);
    expect(err.message).to.include('stderr passed 100000 bytes');
  });

  it('gives up on a command that never ends at its deadline and drops the connection', async () => {
    peer.behaviour = (s) => s.write('started\n');
    const t0 = Date.now();
    const err = await shell.exec(target, 'sleep inf', { timeoutMs: 300 }).catch((e) => e);
    expect(err).to.be.instanceOf(DeadlineExceededError);
    expect(Date.now() - t0).to.be.below(3000);
    await until('the connection to close', () => peer.connections === 0);
    // The next command gets a new connection.
    peer.behaviour = (s) => {
      s.write('ok');
      s.exit(0);
      s.end();
    };
    expect((await shell.exec(target, 'true')).stdout).to.equal('ok');
  });

  it('gives up when its signal is aborted (a DELETE of the VM), and refuses to start on an aborted one', async () => {
    peer.behaviour = () => undefined;
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 100);
    const err = await shell.exec(target, 'stall', { signal: ac.signal }).catch((e) => e);
    expect(err).to.be.instanceOf(AgentUnavailableError);
    expect(err.message).to.include('given up');
    expect(await shell.exec(target, 'x', { signal: ac.signal }).catch((e) => e)).to.be.instanceOf(
      AgentUnavailableError,
    );
  });

  it('gives up when the abort comes while it connects: during the handshake, or as the connection is made', async () => {
    peer.behaviour = () => undefined; // a command that would never end
    const conns = daemonConnections();
    const ac = new AbortController();
    // the connection is made and the abort comes in the same moment, before the command is sent
    const racing = Object.assign(Object.create(conns) as typeof conns, {
      get: async (t: SshTarget) => {
        const c = await conns.get(t);
        ac.abort();
        return c;
      },
    });
    let t0 = Date.now();
    let err = await new Ssh2RemoteShell(racing)
      .exec(target, 'stall', { signal: ac.signal, timeoutMs: 15_000 })
      .catch((e: Error) => e);
    expect(err).to.be.instanceOf(AgentUnavailableError);
    expect((err as Error).message).to.include('given up');
    expect(Date.now() - t0).to.be.below(5000);
    // a handshake that never ends, aborted 100 ms in
    const stuck = Object.assign(Object.create(conns) as typeof conns, { get: () => new Promise<never>(() => {}) });
    const ac2 = new AbortController();
    setTimeout(() => ac2.abort(), 100);
    t0 = Date.now();
    err = await new Ssh2RemoteShell(stuck)
      .exec(target, 'x', { signal: ac2.signal, timeoutMs: 15_000 })
      .catch((e: Error) => e);
    expect(err).to.be.instanceOf(AgentUnavailableError);
    expect(Date.now() - t0).to.be.below(5000);
  });

  it('fails at once, as unavailable, on a connection that closed after it was handed out (ssh2 throws "Not connected")', async () => {
    peer.behaviour = (s) => s.exit(0);
    const conns = daemonConnections();
    const closed = Object.assign(Object.create(conns) as typeof conns, {
      get: async (t: SshTarget) => {
        const c = await conns.get(t);
        c.end();
        await new Promise<void>((r) => c.once('close', () => r()));
        return c;
      },
    });
    const t0 = Date.now();
    const err = await new Ssh2RemoteShell(closed).exec(target, 'true', { timeoutMs: 15_000 }).catch((e: Error) => e);
    expect(err).to.be.instanceOf(AgentUnavailableError);
    expect((err as Error).message).to.include('Not connected');
    expect(Date.now() - t0).to.be.below(5000);
  });

  it('refuses a forwarded connection whose SSH connection closed meanwhile (ssh2 throws; before, the daemon did not catch it)', async () => {
    peer.behaviour = (s) => s.exit(0);
    const conns = daemonConnections();
    let handed = 0;
    const flaky = Object.assign(Object.create(conns) as typeof conns, {
      get: async (t: SshTarget) => {
        const c = await conns.get(t);
        // the tunnel's open asks once; its first connection then finds the client closed
        if (++handed === 2) {
          c.end();
          await new Promise<void>((r) => c.once('close', () => r()));
        }
        return c;
      },
    });
    const tunnels = new Ssh2Tunnels(flaky);
    const f = await tunnels.open('vm', target, 0, 22);
    const closedBy = await new Promise<string>((resolve) => {
      const s = connect(f.host_port, '127.0.0.1');
      s.on('error', () => undefined);
      s.on('close', () => resolve('closed'));
      setTimeout(() => resolve('left open'), 3000);
    });
    expect(closedBy).to.equal('closed');
    await tunnels.close('vm', f.host_port);
  });

  it('settles every hostile peer in bounded time and memory: output whole or a domain error (fast-check)', async () => {
    const CAP = 256 * 1024;
    const piece = fc.record({ to: fc.constantFrom('out', 'err'), size: fc.integer({ min: 0, max: 200_000 }) });
    const ending = fc.constantFrom('exit', 'end-only', 'signal', 'nothing', 'destroy', 'drop-connection');
    await fc.assert(
      fc.asyncProperty(
        fc.array(piece, { maxLength: 6 }),
        ending,
        fc.integer({ min: 0, max: 255 }),
        async (pieces, how, code) => {
          let sent = '';
          peer.behaviour = (s) => {
            for (const p of pieces) {
              const data = Buffer.alloc(p.size, p.to === 'out' ? 'o' : 'e');
              if (p.to === 'out') {
                s.write(data);
                sent += data.toString();
              } else s.stderr.write(data);
            }
            if (how === 'exit') s.exit(code);
            if (how === 'signal') s.exit('KILL', false, '');
            if (how === 'exit' || how === 'end-only' || how === 'signal') s.end();
            if (how === 'destroy') s.destroy();
            if (how === 'drop-connection') setImmediate(() => peer.close().catch(() => undefined));
          };
          const t0 = Date.now();
          const r = await shell.exec(target, 'x', { timeoutMs: 1000, maxOutputBytes: CAP }).then(
            (v) => v,
            (e: Error) => e,
          );
          expect(Date.now() - t0, 'settled in time').to.be.below(5000);
          const outTotal = pieces.filter((p) => p.to === 'out').reduce((n, p) => n + p.size, 0);
          const errTotal = pieces.filter((p) => p.to === 'err').reduce((n, p) => n + p.size, 0);
          if (r instanceof Error) {
            expect(isDomainError(r), String(r)).to.equal(true);
            if (how === 'exit' && outTotal <= CAP && errTotal <= CAP) expect.fail(`an honest command failed: ${r}`);
          } else {
            expect(r.stdout.length).to.be.at.most(CAP);
            expect(sent.startsWith(r.stdout)).to.equal(true);
            if (how === 'exit') expect(r).to.include({ code, stdout: sent });
          }
          if (how === 'drop-connection') {
            peer = new SshPeer();
            target = await peer.listen();
          }
        },
      ),
      { numRuns: Number(process.env.SVC_FUZZ_RUNS ?? 25) },
    );
  });
});
