import { InvalidArgumentError } from './errors.js';
import { parseCidr } from './ip.js';
import { assertSecretName, isHostName, isObject } from './names.js';

/**
 * A SOCKS5 proxy of the user's: `address` is `host:port` (a name, resolved when a connection is
 * dialed, or an address; IPv6 in brackets). RFC 1929 credentials are a `username` and the name of
 * a host `secret` holding the password: the password is never in a policy, an answer or a log.
 */
export interface EgressProxy {
  address: string;
  username?: string;
  secret?: string;
}

/** RFC 1929 caps a username (and a password) at 255 bytes. */
const MAX_CREDENTIAL_BYTES = 255;

/** `host:port` of a proxy: the host and port apart, or an InvalidArgumentError naming the field. */
export function proxyHostPort(address: string, where = 'proxy.address'): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^\s:[\]/]+)):(\d{1,5})$/.exec(address);
  const port = m ? Number(m[3]) : 0;
  if (!m || port < 1 || port > 65535)
    throw new InvalidArgumentError(
      `${where} must be HOST:PORT (a name or an address, IPv6 in brackets), got ${JSON.stringify(address).slice(0, 80)}`,
    );
  const host = m[1] ?? m[2].toLowerCase();
  const ok = m[1]
    ? parseCidr(host)?.family === 6
    : /^[\d.]+$/.test(host)
      ? parseCidr(host)?.family === 4
      : isHostName(host.replace(/\.$/, ''));
  if (!ok) throw new InvalidArgumentError(`${where}: ${host} is not a host name or an IP address`);
  return { host, port };
}

/** Validates a policy's `proxy` {address, username?, secret?}. */
export function parseEgressProxy(v: unknown, where = 'proxy'): EgressProxy {
  if (!isObject(v)) throw new InvalidArgumentError(`${where} must be an object {address, username?, secret?}`);
  for (const k of Object.keys(v))
    if (!['address', 'username', 'secret'].includes(k))
      throw new InvalidArgumentError(`${where}: unknown field "${k}"`);
  if (typeof v.address !== 'string') throw new InvalidArgumentError(`${where}.address must be HOST:PORT`);
  const { host, port } = proxyHostPort(v.address.trim(), `${where}.address`);
  const address = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
  const out: EgressProxy = { address };
  if (v.username !== undefined) {
    if (
      typeof v.username !== 'string' ||
      !v.username ||
      new TextEncoder().encode(v.username).length > MAX_CREDENTIAL_BYTES ||
      /[\x00-\x1f\x7f]/.test(v.username)
    )
      throw new InvalidArgumentError(`${where}.username must be 1-255 bytes of text`);
    out.username = v.username;
  }
  if (v.secret !== undefined) {
    if (out.username === undefined)
      throw new InvalidArgumentError(`${where}.secret (the password) needs a username (RFC 1929)`);
    try {
      out.secret = assertSecretName(v.secret);
    } catch (err) {
      throw new InvalidArgumentError(`${where}.secret: ${(err as Error).message}`);
    }
  }
  return out;
}
