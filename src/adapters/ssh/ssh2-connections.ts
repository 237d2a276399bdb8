import ssh2 from 'ssh2';
import { AgentUnavailableError } from '../../domain/errors.js';
import type { SshKeys, SshTarget } from '../../ports/tunnels.js';

/** One ssh2 connection per guest SSH endpoint, made on demand and replaced when it drops. */
export class Ssh2Connections {
  private readonly clients = new Map<string, Promise<ssh2.Client>>();

  constructor(private readonly keys: SshKeys) {}

  get(t: SshTarget): Promise<ssh2.Client> {
    const key = `${t.user}@${t.host}:${t.port}`;
    let p = this.clients.get(key);
    if (!p) {
      p = this.connect(t);
      this.clients.set(key, p);
      p.then(
        (c) => {
          const drop = () => {
            if (this.clients.get(key) === p) this.clients.delete(key);
          };
          c.on('close', drop);
          c.on('error', drop);
        },
        () => this.clients.delete(key),
      );
    }
    return p;
  }

  private async connect(t: SshTarget): Promise<ssh2.Client> {
    const privateKey = await this.keys.privateKey();
    return new Promise((resolve, reject) => {
      const c = new ssh2.Client();
      c.once('ready', () => resolve(c));
      c.once('error', (err) =>
        reject(new AgentUnavailableError(`ssh to ${t.user}@${t.host}:${t.port} failed: ${err.message}`)),
      );
      c.connect({
        host: t.host,
        port: t.port,
        username: t.user,
        privateKey,
        readyTimeout: 10_000,
        keepaliveInterval: 15_000,
      });
    });
  }

  /** Closes the connection to one target (or all). */
  end(t?: SshTarget): void {
    this.close(t, (c) => c.end());
  }

  /** Cuts the connection to one target at once, whatever is in flight (a guest that stalls or floods). */
  drop(t: SshTarget): void {
    this.close(t, (c) => c.destroy());
  }

  private close(t: SshTarget | undefined, how: (c: ssh2.Client) => void): void {
    for (const [key, p] of this.clients) {
      if (!t || key === `${t.user}@${t.host}:${t.port}`) {
        this.clients.delete(key);
        void p.then(how, () => undefined);
      }
    }
  }
}
