import { InvalidArgumentError } from './errors.js';

/** The key types an OpenSSH `authorized_keys` or `known_hosts` line may name here. */
export const SSH_KEY_TYPES = [
  'ssh-ed25519',
  'ecdsa-sha2-nistp256',
  'ecdsa-sha2-nistp384',
  'ecdsa-sha2-nistp521',
  'ssh-rsa',
  'sk-ssh-ed25519@openssh.com',
  'sk-ecdsa-sha2-nistp256@openssh.com',
] as const;

/** Longer than any key above (a 16384-bit RSA key is about 2.8 KB in base64) with a comment. */
const MAX_LINE = 8192;
const MAX_COMMENT = 256;

/** A public key as one line: `TYPE BASE64 [COMMENT]`. */
export interface SshPublicKey {
  type: string;
  /** The key's SSH wire encoding, base64 as written. */
  data: string;
  comment?: string;
}

/**
 * `line` as one OpenSSH public key (`ssh-ed25519 AAAA... me@laptop`): a type of SSH_KEY_TYPES, its
 * base64 naming the same type inside, an optional printable comment. No options in front
 * (`command=`, `from=`): a key given to svc logs in as itself, nothing more. InvalidArgumentError
 * says what is wrong.
 */
export function parseSshPublicKey(line: unknown, what = 'public_key'): SshPublicKey {
  if (typeof line !== 'string' || !line.trim())
    throw new InvalidArgumentError(`${what} is required: a line of a .pub file`);
  const text = line.trim();
  if (text.length > MAX_LINE) throw new InvalidArgumentError(`${what} is longer than ${MAX_LINE} characters`);
  if (/[\r\n]/.test(text)) throw new InvalidArgumentError(`${what} must be one line`);
  const [type, data, ...rest] = text.split(/[ \t]+/);
  if (!(SSH_KEY_TYPES as readonly string[]).includes(type)) {
    throw new InvalidArgumentError(
      `${what} must start with its type (${SSH_KEY_TYPES.slice(0, 5).join(', ')}, ...), got ${JSON.stringify(type.slice(0, 40))}: ` +
        'a line of a .pub file, without options',
    );
  }
  if (!data || !/^[A-Za-z0-9+/]+={0,2}$/.test(data) || data.length % 4 !== 0)
    throw new InvalidArgumentError(`${what}: the key after ${type} is not base64`);
  if (wireType(Buffer.from(data, 'base64')) !== type)
    throw new InvalidArgumentError(`${what}: the key's data is not a ${type} key`);
  const comment = rest.join(' ');
  if (comment.length > MAX_COMMENT || /[\x00-\x1f\x7f]/.test(comment))
    throw new InvalidArgumentError(`${what}: the comment must be printable, ${MAX_COMMENT} characters at most`);
  return { type, data, ...(comment ? { comment } : {}) };
}

/** The line of a key (without its comment when `comment` is false). */
export function sshKeyLine(k: SshPublicKey, comment = true): string {
  return [k.type, k.data, ...(comment && k.comment ? [k.comment] : [])].join(' ');
}

/**
 * A host key as a server sends it in the handshake (its wire encoding) as a `known_hosts` key:
 * `TYPE BASE64`. InvalidArgumentError when it names no known type.
 */
export function hostKeyOfWire(wire: Buffer): SshPublicKey {
  const type = wireType(wire);
  if (!type || !(SSH_KEY_TYPES as readonly string[]).includes(type))
    throw new InvalidArgumentError(`the guest's SSH server sent a host key of an unknown type`);
  return { type, data: wire.toString('base64') };
}

/** The type string an SSH wire key starts with (uint32 length, then the name); undefined when it has none. */
function wireType(wire: Buffer): string | undefined {
  if (wire.length < 4) return undefined;
  const n = wire.readUInt32BE(0);
  if (n < 1 || n > 64 || wire.length < 4 + n + 4) return undefined;
  return wire.subarray(4, 4 + n).toString('latin1');
}
