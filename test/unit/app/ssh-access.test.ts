import { expect } from 'chai';
import { PassThrough, type Duplex, type Readable } from 'node:stream';
import { text } from 'node:stream/consumers';
import { generateEd25519 } from '../../../src/adapters/ssh/keygen.js';
import type { GuestProxy } from '../../../src/app/guest-proxy.js';
import { SSH_SERVER_WAIT_MS, SshAccess } from '../../../src/app/ssh-access.js';
import type { ExecRequest, ExecResult } from '../../../src/domain/agent.js';
import {
  AgentFailureError,
  AgentUnavailableError,
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
} from '../../../src/domain/errors.js';
import type { Clock } from '../../../src/ports/clock.js';
import type { SshHostKeys } from '../../../src/ports/tunnels.js';

const HOST_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIElQvGkvb2jzRINtnJk+9fO/EpJT1SIaVraFdmShIoIR';

/** The agent proxy as SshAccess uses it: what it was asked to run, and the answers it is told to give. */
class StandInGuest {
  execs: { name: string; req: ExecRequest; stdin: string }[] = [];
  reply: ExecResult = { stdout: 'added\n', stderr: '', exit_code: 0 };
  portError?: Error;
  ports: number[] = [];
  async exec(name: string, req: ExecRequest, stdin?: Readable): Promise<ExecResult> {
    this.execs.push({ name, req, stdin: stdin ? await text(stdin) : '' });
    return this.reply;
  }
  async openPort(_name: string, port: number): Promise<Duplex> {
    this.ports.push(port);
    if (this.portError) throw this.portError;
    return new PassThrough();
  }
}

describe('app/SshAccess: a person’s key into a guest, and the host key to pin', () => {
  const key = generateEd25519('me@laptop').public.trim();
  let guest: StandInGuest;
  let access: SshAccess;
  let read: Duplex[];
  let now: number;
  beforeEach(() => {
    guest = new StandInGuest();
    read = [];
    const hostKeys: SshHostKeys = {
      read: async (s) => {
        read.push(s);
        return HOST_KEY;
      },
    };
    now = 0;
    const clock: Clock = {
      now: () => now,
      sleep: async (ms) => void (now += ms),
    };
    access = new SshAccess(guest as unknown as GuestProxy, hostKeys, clock);
  });

  it("adds the key for root as the agent's own user (no user named, so older agents do it too), the key on stdin", async () => {
    const r = await access.authorize('web', { public_key: `${key}\n` });
    expect(r).to.deep.equal({ user: 'root', added: true, host_keys: [HOST_KEY] });
    expect(guest.execs).to.have.length(1);
    const { name, req, stdin } = guest.execs[0];
    expect(name).to.equal('web');
    expect(req).to.include({ cmd: '/bin/sh' });
    expect(req.user).to.equal(undefined);
    expect(req.env).to.equal(undefined);
    expect(req.args[0]).to.equal('-c');
    expect(req.args[1]).to.match(/authorized_keys/);
    // the key never reaches the command line, only stdin
    expect(req.args.join(' ')).not.to.contain(key.split(' ')[1]);
    expect(stdin).to.equal(`${key}\n`);
    expect(guest.ports).to.deep.equal([22]);
    expect(read).to.have.length(1);
  });

  it('runs as another user by name, and says when the key was there already', async () => {
    guest.reply = { stdout: 'present\n', stderr: '', exit_code: 0 };
    const r = await access.authorize('web', { public_key: key, user: 'svc' });
    expect(r).to.deep.equal({ user: 'svc', added: false, host_keys: [HOST_KEY] });
    expect(guest.execs[0].req.user).to.equal('svc');
  });

  it('refuses a bad body before anything runs in the guest', async () => {
    const bad: [unknown, RegExp][] = [
      [undefined, /JSON object/],
      [[key], /JSON object/],
      [{ public_key: key, shell: '/bin/sh' }, /unknown key "shell"/],
      [{ public_key: `no-pty ${key}` }, /must start with its type/],
      [{ public_key: key, user: 7 }, /user must be a string/],
      [{ public_key: key, user: 'a b' }, /user must be a user name or number/],
    ];
    for (const [body, re] of bad) {
      const err = await access.authorize('web', body).catch((e: Error) => e);
      expect(err, JSON.stringify(body)).to.be.instanceOf(InvalidArgumentError);
      expect((err as Error).message).to.match(re);
    }
    expect(guest.execs).to.deep.equal([]);
  });

  it('answers 400 for a user the guest does not have, and 502 with its words when the script fails', async () => {
    guest.reply = { stdout: '', stderr: '', exit_code: 127, error: 'no user bob in the guest' };
    const a = await access.authorize('web', { public_key: key, user: 'bob' }).catch((e: Error) => e);
    expect(a).to.be.instanceOf(InvalidArgumentError);
    expect((a as Error).message).to.equal('no user bob in the guest');
    guest.reply = { stdout: '', stderr: "mkdir: can't create directory '/nonexistent/.ssh'\n", exit_code: 1 };
    const b = await access.authorize('web', { public_key: key, user: 'nobody' }).catch((e: Error) => e);
    expect(b).to.be.instanceOf(AgentFailureError);
    expect((b as Error).message).to.equal(
      "could not add the key to nobody's ~/.ssh/authorized_keys in web: mkdir: can't create directory '/nonexistent/.ssh'",
    );
    guest.reply = { stdout: 'something else\n', stderr: '', exit_code: 0 };
    expect(await access.authorize('web', { public_key: key }).catch((e: Error) => e)).to.be.instanceOf(
      AgentFailureError,
    );
  });

  it('gives a server away for its restart (a clone renews its keys) a moment, then says the VM has none', async () => {
    guest.portError = new NotFoundError('nothing listens on port 22 in the guest');
    const err = await access.info('web').catch((e: Error) => e);
    expect(err).to.be.instanceOf(InvalidStateError);
    expect((err as Error).message).to.equal('vm web has no SSH server: nothing listens on port 22 in it');
    expect(now).to.equal(SSH_SERVER_WAIT_MS);
    expect(guest.ports.length).to.equal(SSH_SERVER_WAIT_MS / 250 + 1);
    // back after a second: the key is read then
    now = 0;
    guest.ports = [];
    const open = guest.openPort.bind(guest);
    guest.openPort = async (n, p) => {
      if (guest.ports.length === 3) guest.portError = undefined;
      return open(n, p);
    };
    expect(await access.info('web')).to.deep.equal({ host_keys: [HOST_KEY] });
    expect(guest.ports).to.deep.equal([22, 22, 22, 22]);
    expect(now).to.equal(750);
    // a server that shows no key is tried again as long, then is the answer; any other failure at once
    guest.portError = new AgentFailureError('no SSH host key from the guest: the connection closed');
    now = 0;
    expect(await access.info('web').catch((e: Error) => e)).to.equal(guest.portError);
    expect(now).to.equal(SSH_SERVER_WAIT_MS);
    guest.portError = new AgentUnavailableError('vm web is suspended');
    now = 0;
    expect(await access.info('web').catch((e: Error) => e)).to.equal(guest.portError);
    expect(now).to.equal(0);
  });
});
