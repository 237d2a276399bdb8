import { createSocket } from 'node:dgram';
import { statSync, readFileSync } from 'node:fs';
import { connect, isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import { parseIp, type IpAddr } from '../../domain/ip.js';

const TIMEOUT_MS = 2500;
/** The largest answer read from an upstream resolver. */
const MAX_ANSWER = 65535;

/**
 * The host's resolvers, as its /etc/resolv.conf names them (read again when the file changes):
 * guests' queries that their policy allows are sent there as they came, over UDP or TCP.
 */
export class DnsUpstream {
  private servers: string[] = [];
  private stamp = '';

  /** `fixed`: resolvers as HOST or HOST:PORT (`[v6]:PORT`) instead of resolv.conf's. */
  constructor(
    private readonly fixed: string[] = [],
    private readonly resolvConf = '/etc/resolv.conf',
  ) {}

  /** The resolvers, re-read when resolv.conf changed. */
  nameservers(): string[] {
    if (this.fixed.length) return this.fixed;
    let stamp = '';
    try {
      const st = statSync(this.resolvConf);
      stamp = `${st.mtimeMs}:${st.size}:${st.ino}`;
    } catch {
      stamp = 'none';
    }
    if (stamp !== this.stamp) {
      this.stamp = stamp;
      let text = '';
      try {
        text = readFileSync(this.resolvConf, 'utf8');
      } catch {
        // none: the host cannot resolve either
      }
      this.servers = text
        .split('\n')
        .map((l) => /^\s*nameserver\s+(\S+)/.exec(l)?.[1])
        .filter((s): s is string => !!s && isIP(s.split('%')[0]) !== 0)
        .slice(0, 3);
      if (!this.servers.length) this.servers = ['127.0.0.1'];
    }
    return this.servers;
  }

  /** Sends a query to each resolver in turn until one answers. Rejects when none does. */
  async query(msg: Buffer, tcp = false): Promise<Buffer> {
    let last: Error = new Error('no resolver');
    for (const server of this.nameservers()) {
      const { host, port } = hostPort(server);
      try {
        return await (tcp ? queryTcp(host, port, msg) : queryUdp(host, port, msg));
      } catch (err) {
        last = err as Error;
      }
    }
    throw last;
  }
}

/** `1.2.3.4`, `1.2.3.4:5353`, `::1`, `[::1]:5353`. */
export function hostPort(server: string): { host: string; port: number } {
  const v6 = /^\[([^\]]+)\](?::(\d+))?$/.exec(server);
  if (v6) return { host: v6[1], port: Number(v6[2] ?? 53) };
  const m = /^([^:]+):(\d+)$/.exec(server);
  return m ? { host: m[1], port: Number(m[2]) } : { host: server, port: 53 };
}

function queryUdp(server: string, port: number, msg: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const s = createSocket(isIP(server) === 6 ? 'udp6' : 'udp4');
    const done = (err: Error | undefined, answer?: Buffer) => {
      clearTimeout(timer);
      s.close();
      if (err) reject(err);
      else resolve(answer!);
    };
    const timer = setTimeout(() => done(new Error(`resolver ${server} did not answer`)), TIMEOUT_MS);
    s.on('error', (err) => done(err));
    s.on('message', (answer) => {
      // The answer to this query (its id), from any address the kernel let in on this socket.
      if (answer.length >= 12 && answer.readUInt16BE(0) === msg.readUInt16BE(0)) done(undefined, answer);
    });
    s.send(msg, port, server, (err) => err && done(err));
  });
}

function queryTcp(server: string, port: number, msg: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const sock = connect({ host: server, port });
    const chunks: Buffer[] = [];
    let have = 0;
    const done = (err: Error | undefined, answer?: Buffer) => {
      clearTimeout(timer);
      sock.destroy();
      if (err) reject(err);
      else resolve(answer!);
    };
    const timer = setTimeout(() => done(new Error(`resolver ${server} did not answer over tcp`)), TIMEOUT_MS * 2);
    sock.on('error', (err) => done(err));
    sock.on('connect', () => {
      const len = Buffer.alloc(2);
      len.writeUInt16BE(msg.length);
      sock.write(Buffer.concat([len, msg]));
    });
    sock.on('data', (d: Buffer) => {
      chunks.push(d);
      have += d.length;
      if (have > MAX_ANSWER + 2) return done(new Error('answer too large'));
      const all = Buffer.concat(chunks);
      if (all.length >= 2 && all.length >= 2 + all.readUInt16BE(0))
        done(undefined, all.subarray(2, 2 + all.readUInt16BE(0)));
    });
    sock.on('end', () => done(new Error('resolver closed the connection')));
  });
}

/** The host's own addresses (every interface's), looked up again every 30 s. */
export class HostAddresses {
  private set = new Set<string>();
  private at = 0;

  has(ip: IpAddr): boolean {
    if (Date.now() - this.at > 30_000) this.refresh();
    return this.set.has(`${ip.family}:${ip.value}`);
  }

  private refresh(): void {
    this.at = Date.now();
    const next = new Set<string>();
    for (const list of Object.values(networkInterfaces())) {
      for (const a of list ?? []) {
        const ip = parseIp(a.address.split('%')[0]);
        if (ip) next.add(`${ip.family}:${ip.value}`);
      }
    }
    this.set = next;
  }
}
