import { createHash } from 'node:crypto';
import { connect } from 'node:net';
import type { ServerHostKeyAlgorithm } from 'ssh2';
import { Ssh2HostKeys } from '../../src/adapters/ssh/ssh2-host-keys.js';

/**
 * One try: the SHA-256 of the SSH host key the server on 127.0.0.1:`port` shows (the daemon's own
 * reader, which refuses it once seen), of one of the algorithms `types` when given; undefined when
 * it offers none of them or does not answer.
 */
export async function sshHostKeyOnce(port: number, types?: ServerHostKeyAlgorithm[]): Promise<string | undefined> {
  const line = await new Ssh2HostKeys().read(connect(port, '127.0.0.1'), 10_000, types).catch(() => undefined);
  return (
    line &&
    createHash('sha256')
      .update(Buffer.from(line.split(' ')[1], 'base64'))
      .digest('base64')
  );
}

/** The SHA-256 of the SSH host key the server on 127.0.0.1:`port` shows, tried every half second for 30 s until it answers. */
export async function sshHostKey(port: number, vm: string): Promise<string> {
  for (let i = 0; ; i++) {
    const key = await sshHostKeyOnce(port);
    if (key) return key;
    if (i >= 60) throw new Error(`vm ${vm} shows no SSH host key on port ${port}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}
