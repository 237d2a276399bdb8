import { Readable } from 'node:stream';
import { inject, injectable } from 'inversify';
import { checkGuestUser } from '../domain/agent.js';
import { AgentFailureError, InvalidArgumentError, InvalidStateError, NotFoundError } from '../domain/errors.js';
import { parseSshPublicKey, sshKeyLine } from '../domain/ssh-keys.js';
import { Clock } from '../ports/clock.js';
import { SshHostKeys } from '../ports/tunnels.js';
import { GuestProxy } from './guest-proxy.js';

/** The guest port people's SSH clients reach (through the agent: `svc fwd stdio NAME 22`). */
export const GUEST_SSH_PORT = 22;
/**
 * How long a guest with nothing on its port 22 is given before that is the answer: a clone or a
 * restored create makes its SSH host keys anew as it wakes and restarts its server, which is
 * away for a second or two then (a `svc new web && svc ssh web` meets that).
 */
export const SSH_SERVER_WAIT_MS = 10_000;

/**
 * Adds the key on its stdin to the user's `~/.ssh/authorized_keys`, run as that user (so the file is theirs):
 * once (a key already there by its data, whatever its comment, is left), on a line of its own.
 * The home is the passwd entry's of the uid it runs as: an agent from before exec's `user` runs
 * root's commands with the HOME it was started with.
 */
const AUTHORIZE_SCRIPT = [
  'set -e',
  'umask 077',
  'IFS= read -r key',
  'data=$(printf "%s\\n" "$key" | cut -d " " -f 2)',
  '[ -n "$data" ]',
  'h=$(awk -F: -v u="$(id -u)" \'$3 == u { print $6; exit }\' /etc/passwd)',
  '[ -n "$h" ] && HOME=$h',
  'd="$HOME/.ssh"; f="$d/authorized_keys"',
  'mkdir -p "$d"',
  '[ -f "$f" ] || : > "$f"',
  'if grep -qF -- "$data" "$f"; then echo present; exit 0; fi',
  'if [ -s "$f" ] && [ -n "$(tail -c 1 "$f")" ]; then echo >> "$f"; fi',
  'printf "%s\\n" "$key" >> "$f"',
  'echo added',
].join('\n');

export interface SshAccessInfo {
  /** The keys the guest's SSH server shows, as `known_hosts` takes them (`TYPE BASE64`). */
  host_keys: string[];
}

export interface SshAuthorized extends SshAccessInfo {
  user: string;
  /** False when the key was there already. */
  added: boolean;
}

/**
 * People's own SSH clients into a VM (docs/api.md, "SSH for people's own clients"): their public key added for a user of
 * the guest through its agent, and the guest's host key read through the agent too, so a client
 * can pin it (StrictHostKeyChecking) rather than trust the first key it sees.
 */
@injectable()
export class SshAccess {
  constructor(
    @inject(GuestProxy) private readonly guest: GuestProxy,
    @inject(SshHostKeys) private readonly hostKeys: SshHostKeys,
    @inject(Clock) private readonly clock: Clock,
  ) {}

  /**
   * The host key of the VM's SSH server. 409 when nothing listens on its port 22 within
   * SSH_SERVER_WAIT_MS; 502 when what listens there shows no key within it.
   */
  async info(name: string): Promise<SshAccessInfo> {
    const until = this.clock.now() + SSH_SERVER_WAIT_MS;
    for (;;) {
      try {
        return { host_keys: [await this.hostKeys.read(await this.guest.openPort(name, GUEST_SSH_PORT))] };
      } catch (err) {
        // nothing listening, or a server that went before its key (one restarting): tried again
        const absent = err instanceof NotFoundError;
        if (!absent && !(err instanceof AgentFailureError)) throw err;
        if (this.clock.now() < until) {
          await this.clock.sleep(250);
          continue;
        }
        if (!absent) throw err;
        throw new InvalidStateError(`vm ${name} has no SSH server: nothing listens on port ${GUEST_SSH_PORT} in it`);
      }
    }
  }

  /** `{public_key, user?}` (user: root by default): the key may log in as the user from now on. */
  async authorize(name: string, body: unknown): Promise<SshAuthorized> {
    if (!body || typeof body !== 'object' || Array.isArray(body))
      throw new InvalidArgumentError('the body must be a JSON object: {public_key, user?}');
    const b = body as Record<string, unknown>;
    for (const k of Object.keys(b))
      if (k !== 'public_key' && k !== 'user') throw new InvalidArgumentError(`unknown key ${JSON.stringify(k)}`);
    const key = parseSshPublicKey(b.public_key);
    if (b.user !== undefined && typeof b.user !== 'string') throw new InvalidArgumentError('user must be a string');
    const user = checkGuestUser(b.user || 'root');
    const r = await this.guest.exec(
      name,
      {
        cmd: '/bin/sh',
        args: ['-c', AUTHORIZE_SCRIPT],
        // root is the agent's own user: not named, so agents from before `user` do this too
        ...(user === 'root' || user === '0' ? {} : { user }),
        timeoutMs: 30_000,
      },
      Readable.from([`${sshKeyLine(key)}\n`]),
    );
    if (r.error && /^no user /.test(r.error)) throw new InvalidArgumentError(r.error);
    const said = r.stdout.trim();
    if (r.exit_code !== 0 || (said !== 'added' && said !== 'present')) {
      const why = (r.error ?? r.stderr).trim().slice(0, 300) || `exit code ${r.exit_code}`;
      throw new AgentFailureError(`could not add the key to ${user}'s ~/.ssh/authorized_keys in ${name}: ${why}`);
    }
    return { user, added: said === 'added', ...(await this.info(name)) };
  }
}
