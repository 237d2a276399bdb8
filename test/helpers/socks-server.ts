import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

/** One CONNECT a test SOCKS5 server was asked for. */
export interface SocksAsked {
  /** 1: an IPv4 address, 3: a name. */
  atyp: number;
  host: string;
  port: number;
  user?: string;
  password?: string;
}

/**
 * A small SOCKS5 server (RFC 1928 CONNECT, RFC 1929 username/password) for tests: it records what
 * it was asked and connects to where `route` sends the target (a name need not resolve). With
 * `credentials`, other credentials are refused.
 */
export class TestSocks {
  readonly asked: SocksAsked[] = [];
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  port = 0;

  constructor(
    private readonly route: (host: string, port: number) => { host: string; port: number },
    private readonly credentials?: { user: string; password: string },
  ) {}

  async start(): Promise<this> {
    this.server = createServer((s) => this.serve(s));
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', () => r()));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  stop(): void {
    this.server?.close();
    for (const s of this.sockets) s.destroy();
  }

  private serve(s: Socket): void {
    this.sockets.add(s);
    s.on('close', () => this.sockets.delete(s));
    s.on('error', () => undefined);
    let buf = Buffer.alloc(0);
    let stage: 'hello' | 'auth' | 'request' = 'hello';
    let user: string | undefined;
    let password: string | undefined;
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        if (stage === 'hello') {
          if (buf.length < 2 || buf.length < 2 + buf[1]) return;
          const methods = [...buf.subarray(2, 2 + buf[1])];
          buf = buf.subarray(2 + buf[1]);
          const want = this.credentials ? 2 : 0;
          if (!methods.includes(want)) return void s.end(Buffer.from([5, 0xff]));
          s.write(Buffer.from([5, want]));
          stage = want === 2 ? 'auth' : 'request';
        } else if (stage === 'auth') {
          if (buf.length < 2 || buf.length < 3 + buf[1]) return;
          const ulen = buf[1];
          const plen = buf[2 + ulen];
          if (buf.length < 3 + ulen + plen) return;
          user = buf.subarray(2, 2 + ulen).toString();
          password = buf.subarray(3 + ulen, 3 + ulen + plen).toString();
          buf = buf.subarray(3 + ulen + plen);
          const ok = user === this.credentials!.user && password === this.credentials!.password;
          if (!ok) return void s.end(Buffer.from([1, 1]));
          s.write(Buffer.from([1, 0]));
          stage = 'request';
        } else {
          if (buf.length < 5) return;
          const atyp = buf[3];
          const len = atyp === 1 ? 4 : atyp === 3 ? 1 + buf[4] : 16;
          if (buf.length < 4 + len + 2) return;
          const host = atyp === 1 ? [...buf.subarray(4, 8)].join('.') : buf.subarray(5, 5 + buf[4]).toString();
          const port = buf.readUInt16BE(4 + len);
          const rest = buf.subarray(4 + len + 2);
          this.asked.push({ atyp, host, port, user, password });
          s.off('data', onData);
          s.pause();
          const to = this.route(host, port);
          const up = connect(to.port, to.host);
          up.on('error', () => s.end(Buffer.from([5, 5, 0, 1, 0, 0, 0, 0, 0, 0])));
          up.once('connect', () => {
            s.write(Buffer.from([5, 0, 0, 1, 127, 0, 0, 1, 0, 0]));
            if (rest.length) up.write(rest);
            s.pipe(up).pipe(s);
            s.resume();
            up.on('close', () => s.destroy());
            s.on('close', () => up.destroy());
          });
          return;
        }
      }
    };
    s.on('data', onData);
  }
}
