import { connect } from 'node:net';
import { injectable } from 'inversify';
import type { SshProbe } from '../../ports/tunnels.js';

/**
 * SSH is up when its banner arrives. Under user-mode networking QEMU accepts the host side of a
 * forward before the guest listens, so a connect alone proves nothing.
 */
@injectable()
export class TcpSshProbe implements SshProbe {
  ready(host: string, port: number, timeoutMs: number): Promise<boolean> {
    return new Promise((resolve) => {
      const sock = connect({ host, port });
      let buf = '';
      const done = (ok: boolean) => {
        clearTimeout(timer);
        sock.destroy();
        resolve(ok);
      };
      const timer = setTimeout(() => done(false), timeoutMs);
      sock.setEncoding('latin1');
      sock.on('data', (d: string) => {
        buf += d;
        if (buf.startsWith('SSH-')) done(true);
        else if (buf.length >= 4) done(false);
      });
      sock.on('error', () => done(false));
      sock.on('close', () => done(false));
    });
  }
}
