import type { Duplex } from 'node:stream';
import { injectable } from 'inversify';
import ssh2 from 'ssh2';
import { AgentFailureError, errorMessage } from '../../domain/errors.js';
import { hostKeyOfWire, sshKeyLine } from '../../domain/ssh-keys.js';
import type { SshHostKeys } from '../../ports/tunnels.js';

/** The host key types asked for, best first: what OpenSSH clients prefer when they know none. */
export const HOST_KEY_ALGORITHMS = [
  'ssh-ed25519',
  'ecdsa-sha2-nistp256',
  'ecdsa-sha2-nistp384',
  'ecdsa-sha2-nistp521',
  'rsa-sha2-512',
  'rsa-sha2-256',
  'ssh-rsa',
] as ssh2.ServerHostKeyAlgorithm[];

/**
 * A host key read with ssh2's client: the handshake runs to the server's key, which the verifier
 * takes and refuses, so nothing logs in. ssh2 bounds what the peer sends (its packet limits) and
 * the wait is bounded here.
 */
@injectable()
export class Ssh2HostKeys implements SshHostKeys {
  /** `algorithms`: the host key types to ask for (all of HOST_KEY_ALGORITHMS, ed25519 first, by default). */
  read(stream: Duplex, timeoutMs = 15_000, algorithms = HOST_KEY_ALGORITHMS): Promise<string> {
    return new Promise((resolve, reject) => {
      const client = new ssh2.Client();
      let key: string | undefined;
      let failure: string | undefined;
      const done = () => {
        clearTimeout(timer);
        client.removeAllListeners();
        client.on('error', () => undefined);
        client.end();
        stream.destroy();
        if (key) resolve(key);
        else reject(new AgentFailureError(`no SSH host key from the guest: ${failure ?? 'the connection closed'}`));
      };
      const timer = setTimeout(() => {
        failure = `none within ${timeoutMs} ms`;
        done();
      }, timeoutMs);
      client.on('error', (err) => {
        failure ??= errorMessage(err);
        done();
      });
      client.on('close', done);
      client.connect({
        sock: stream,
        username: 'svc-host-key',
        readyTimeout: timeoutMs,
        algorithms: { serverHostKey: algorithms },
        hostVerifier: (wire: Buffer) => {
          try {
            key = sshKeyLine(hostKeyOfWire(wire));
          } catch (err) {
            failure = errorMessage(err);
          }
          return false;
        },
      });
    });
  }
}
