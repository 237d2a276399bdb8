import type { AddressInfo } from 'node:net';
import ssh2 from 'ssh2';
import { generateEd25519 } from '../../src/adapters/ssh/keygen.js';
import { Ssh2Connections } from '../../src/adapters/ssh/ssh2-connections.js';
import type { SshKeys, SshTarget } from '../../src/ports/tunnels.js';

/** What a guest's SSH server does with one exec channel: it is handed the channel and may do anything. */
export type ExecBehaviour = (stream: ssh2.ServerChannel, command: string) => void;

/**
 * An SSH server on loopback that plays a guest (ssh2's own server): it accepts any key and hands
 * every exec to `behaviour`, so a test can make it honest, flooding, stalling or rude.
 */
export class SshPeer {
  private readonly server: ssh2.Server;
  private readonly clients = new Set<ssh2.Connection>();
  behaviour: ExecBehaviour = (s) => {
    s.exit(0);
    s.end();
  };

  constructor() {
    const hostKey = generateEd25519().private;
    this.server = new ssh2.Server({ hostKeys: [hostKey] }, (client) => {
      this.clients.add(client);
      client.on('close', () => this.clients.delete(client));
      client.on('error', () => undefined);
      client.on('authentication', (ctx) => ctx.accept());
      client.on('ready', () =>
        client.on('session', (accept) => {
          const session = accept();
          session.on('exec', (accept, _reject, info) => {
            const stream = accept();
            stream.on('error', () => undefined);
            this.behaviour(stream, info.command);
          });
        }),
      );
    });
  }

  listen(): Promise<SshTarget> {
    return new Promise((resolve) =>
      this.server.listen(0, '127.0.0.1', () =>
        resolve({ host: '127.0.0.1', port: (this.server.address() as AddressInfo).port, user: 'root' }),
      ),
    );
  }

  /** Connections the daemon's side still holds open. */
  get connections(): number {
    return this.clients.size;
  }

  async close(): Promise<void> {
    for (const c of this.clients) c.end();
    await new Promise((r) => this.server.close(r));
  }
}

/** The daemon's side: connections made with a fresh key pair (the peer accepts any). */
export function daemonConnections(): Ssh2Connections {
  const pair = generateEd25519();
  const keys: SshKeys = {
    publicKey: async () => pair.public,
    privateKey: async () => Buffer.from(pair.private),
  };
  return new Ssh2Connections(keys);
}
