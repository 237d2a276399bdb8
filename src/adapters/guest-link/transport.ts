import { spawn } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { Duplex } from 'node:stream';
import type { AgentEndpoint } from '../../ports/guest-agent.js';
import { childEnv } from '../process-kit/child-env.js';

/** Opens a byte stream to an agent endpoint; http requests ride on it. */
export type Connector = (ep: AgentEndpoint) => Duplex;

/** TCP to the host forward of the agent port (user-mode networking). */
export const tcpConnector: Connector = (ep) => connect({ host: ep.host, port: ep.port, noDelay: true });

/**
 * vsock to `cid:port` through `socat - VSOCK-CONNECT:cid:port` (Node's net has no AF_VSOCK;
 * see docs/agent.md). The process lives as long as the stream.
 */
export function socatVsockConnector(socat = 'socat'): Connector {
  return (ep) => {
    const child = spawn(socat, ['-', `VSOCK-CONNECT:${ep.cid}:${ep.port}`], {
      stdio: ['pipe', 'pipe', 'ignore'],
      env: childEnv(),
    });
    const d = Duplex.from({ readable: child.stdout, writable: child.stdin });
    child.once('error', (err) => d.destroy(err));
    child.once('exit', (code) => {
      if (code) d.destroy(Object.assign(new Error(`socat exited with ${code}`), { code: 'ECONNREFUSED' }));
    });
    d.once('close', () => child.kill());
    return socketLike(d);
  };
}

/**
 * Hybrid vsock (Firecracker's, which Cloud Hypervisor speaks too): the VMM listens on a Unix socket
 * (`ep.socket`); a connection to it sends `CONNECT <port>\n` and reads `OK <n>\n`, then carries the
 * guest port's stream. The returned stream takes writes at once and sends them after the handshake;
 * a refusal (the VMM closes, or answers anything but OK) is ECONNREFUSED, as a closed TCP port is.
 */
export const hybridVsockConnector: Connector = (ep) => new HybridVsock(ep.socket ?? '', ep.port);

class HybridVsock extends Duplex {
  private readonly sock: Socket;
  private ready = false;
  private queued: { chunk: Buffer; cb: (err?: Error | null) => void }[] = [];
  private head = Buffer.alloc(0);

  constructor(path: string, port: number) {
    super({ allowHalfOpen: true });
    this.sock = connect(path);
    this.sock.on('connect', () => this.sock.write(`CONNECT ${port}\n`));
    this.sock.on('data', (d: Buffer) => this.fromVmm(d));
    this.sock.on('end', () => this.push(null));
    this.sock.on('timeout', () => this.emit('timeout'));
    this.sock.on('error', (err: NodeJS.ErrnoException) =>
      this.destroy(err.code === 'ENOENT' ? Object.assign(err, { code: 'ECONNREFUSED' }) : err),
    );
    this.sock.on('close', () => {
      if (!this.ready)
        this.destroy(Object.assign(new Error(`vsock ${port} refused at ${path}`), { code: 'ECONNREFUSED' }));
    });
  }

  private fromVmm(d: Buffer): void {
    if (this.ready) {
      if (!this.push(d)) this.sock.pause();
      return;
    }
    this.head = Buffer.concat([this.head, d]);
    const nl = this.head.indexOf(10);
    if (nl < 0) {
      if (this.head.length > 64)
        this.destroy(Object.assign(new Error('no answer to CONNECT'), { code: 'ECONNREFUSED' }));
      return;
    }
    if (!/^OK \d+$/.test(this.head.subarray(0, nl).toString('latin1').trim())) {
      this.destroy(
        Object.assign(
          new Error(`vsock connect refused: ${this.head.subarray(0, nl).toString('latin1').slice(0, 60)}`),
          { code: 'ECONNREFUSED' },
        ),
      );
      return;
    }
    this.ready = true;
    const rest = this.head.subarray(nl + 1);
    this.head = Buffer.alloc(0);
    this.emit('connect');
    for (const q of this.queued.splice(0)) this.sock.write(q.chunk, q.cb);
    if (rest.length) this.push(rest);
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    if (this.ready) this.sock.write(chunk, cb);
    else this.queued.push({ chunk, cb });
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.sock.end(cb);
  }

  override _read(): void {
    this.sock.resume();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.sock.destroy();
    cb(err);
  }

  // What http.Agent asks of a kept-alive socket, passed to the Unix socket beneath.
  setNoDelay(on?: boolean): this {
    this.sock.setNoDelay(on);
    return this;
  }

  setTimeout(ms: number, cb?: () => void): this {
    this.sock.setTimeout(ms);
    if (cb) this.once('timeout', cb);
    return this;
  }

  setKeepAlive(on?: boolean, delayMs?: number): this {
    this.sock.setKeepAlive(on, delayMs);
    return this;
  }

  ref(): this {
    this.sock.ref();
    return this;
  }

  unref(): this {
    this.sock.unref();
    return this;
  }
}

/**
 * What http.Agent calls on a kept-alive socket (setTimeout, setKeepAlive, ref, unref, setNoDelay),
 * on a stream that is not one: the idle timeout counts from the last byte either way.
 */
function socketLike(d: Duplex): Duplex {
  let ms = 0;
  let timer: NodeJS.Timeout | undefined;
  const arm = () => {
    clearTimeout(timer);
    if (ms > 0) timer = setTimeout(() => d.emit('timeout'), ms);
  };
  d.on('data', arm);
  const write = d.write.bind(d) as (...a: unknown[]) => boolean;
  d.write = ((...a: unknown[]) => (arm(), write(...a))) as Duplex['write'];
  d.once('close', () => clearTimeout(timer));
  return Object.assign(d, {
    setTimeout(next: number, cb?: () => void) {
      ms = next;
      if (cb) d.once('timeout', cb);
      arm();
      return d;
    },
    setKeepAlive: () => d,
    setNoDelay: () => d,
    ref: () => d,
    unref: () => d,
  });
}

/** vsock when the endpoint has a CID and the transport allows it, else TCP. */
export function pickConnector(
  transport: 'auto' | 'tcp' | 'vsock',
  vsock: Connector = socatVsockConnector(),
): Connector {
  return (ep) => {
    if (transport !== 'tcp' && ep.cid) return vsock({ ...ep, port: 7475 });
    return tcpConnector(ep);
  };
}
