import { createServer, type Server, type Socket } from 'node:net';
import { AlreadyExistsError, InternalError } from '../../domain/errors.js';
import type { Forward } from '../../domain/vm.js';
import type { SshTarget, Tunnels } from '../../ports/tunnels.js';
import type { Ssh2Connections } from './ssh2-connections.js';

interface Tunnel {
  info: Forward;
  server: Server;
  sockets: Set<Socket>;
  target: SshTarget;
}

/**
 * Live forwards as in-process SSH local tunnels: a listener on 127.0.0.1:host_port whose every
 * connection becomes an ssh2 `forwardOut` to the guest port. The daemon carries the tunnels, so
 * `pid` is the daemon's.
 */
export class Ssh2Tunnels implements Tunnels {
  private readonly tunnels = new Map<string, Map<number, Tunnel>>();

  constructor(private readonly ssh: Ssh2Connections) {}

  async open(vm: string, target: SshTarget, hostPort: number, guestPort: number): Promise<Forward> {
    await this.ssh.get(target); // fail early when SSH is not reachable
    const sockets = new Set<Socket>();
    const server = createServer({ allowHalfOpen: true }, (sock) => {
      sockets.add(sock);
      sock.on('close', () => sockets.delete(sock));
      sock.on('error', () => sock.destroy());
      sock.pause();
      this.ssh.get(target).then(
        (client) => {
          try {
            client.forwardOut('127.0.0.1', sock.remotePort ?? 0, '127.0.0.1', guestPort, (err, stream) => {
              if (err) return void sock.destroy();
              stream.on('error', () => sock.destroy());
              sock.pipe(stream).pipe(sock);
              sock.resume();
            });
          } catch {
            // ssh2 throws when the connection closed meanwhile ("Not connected"): this connection
            // is refused, the next one gets a new SSH connection
            sock.destroy();
            this.ssh.drop(target);
          }
        },
        () => sock.destroy(),
      );
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', (err: NodeJS.ErrnoException) => {
        if (err.code === 'EADDRINUSE') reject(new AlreadyExistsError(`host port ${hostPort} is busy`));
        else reject(new InternalError(`cannot listen on 127.0.0.1:${hostPort}: ${err.message}`));
      });
      server.listen(hostPort, '127.0.0.1', () => resolve());
    });
    const port = (server.address() as { port: number }).port;
    const info: Forward = { host_port: port, guest_port: guestPort, proto: 'tcp', kind: 'live', pid: process.pid };
    const per = this.tunnels.get(vm) ?? new Map<number, Tunnel>();
    per.set(port, { info, server, sockets, target });
    this.tunnels.set(vm, per);
    return info;
  }

  async close(vm: string, hostPort: number): Promise<void> {
    const per = this.tunnels.get(vm);
    const t = per?.get(hostPort);
    if (!t) return;
    per!.delete(hostPort);
    for (const s of t.sockets) s.destroy();
    await new Promise<void>((r) => t.server.close(() => r()));
    if (per!.size === 0) {
      this.tunnels.delete(vm);
      this.ssh.end(t.target);
    }
  }

  async closeAll(vm: string): Promise<void> {
    for (const port of [...(this.tunnels.get(vm)?.keys() ?? [])]) await this.close(vm, port);
  }

  list(vm: string): Forward[] {
    return [...(this.tunnels.get(vm)?.values() ?? [])].map((t) => t.info);
  }

  async closeEverything(): Promise<void> {
    for (const vm of [...this.tunnels.keys()]) await this.closeAll(vm);
  }
}
