import { createHash } from 'node:crypto';
import { Client, type ServerHostKeyAlgorithm } from 'ssh2';

/**
 * One try: the SHA-256 of the SSH host key the server on 127.0.0.1:`port` shows (ssh2 is told to
 * refuse it once seen), of one of the algorithms `types` when given; undefined when it offers none
 * of them or does not answer.
 */
export function sshHostKeyOnce(port: number, types?: ServerHostKeyAlgorithm[]): Promise<string | undefined> {
  return new Promise<string | undefined>((resolve) => {
    const c = new Client();
    let seen: string | undefined;
    c.on('error', () => resolve(seen));
    c.on('close', () => resolve(seen));
    c.connect({
      host: '127.0.0.1',
      port,
      username: 'root',
      readyTimeout: 10_000,
      ...(types ? { algorithms: { serverHostKey: types } } : {}),
      hostVerifier: (k: Buffer) => {
        seen = createHash('sha256').update(k).digest('base64');
        return false;
      },
    });
  });
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
