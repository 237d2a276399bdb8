import type { Readable } from 'node:stream';
import type { RemoteResult, RemoteShell, SshTarget } from '../../ports/tunnels.js';
import type { Ssh2Connections } from './ssh2-connections.js';

/** Runs a command over SSH (ssh2 exec), streaming `stdin` in with backpressure. */
export class Ssh2RemoteShell implements RemoteShell {
  constructor(private readonly ssh: Ssh2Connections) {}

  async exec(target: SshTarget, command: string, stdin?: Readable): Promise<RemoteResult> {
    const client = await this.ssh.get(target);
    return new Promise((resolve, reject) => {
      client.exec(command, (err, ch) => {
        if (err) return reject(err);
        const out: Buffer[] = [];
        const errOut: Buffer[] = [];
        let code: number | null = null;
        ch.on('data', (d: Buffer) => out.push(d));
        ch.stderr.on('data', (d: Buffer) => errOut.push(d));
        ch.on('exit', (c: number | null) => {
          code = c;
        });
        ch.on('close', () =>
          resolve({ code, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(errOut).toString() }),
        );
        if (stdin) {
          stdin.on('error', () => ch.destroy());
          stdin.pipe(ch);
        } else ch.end();
      });
    });
  }
}
