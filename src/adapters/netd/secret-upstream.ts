import http from 'node:http';
import http2, { type ClientHttp2Session } from 'node:http2';
import type { Duplex } from 'node:stream';
import type { TLSSocket } from 'node:tls';

/** Headers that belong to one connection, not to a request (RFC 9110 7.6.1); never forwarded. */
export const HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/**
 * Where an intercepted connection's requests go: an HTTP/2 session on the connection the guest
 * opened when the upstream chose HTTP/2; else HTTP/1.1 on that connection first, then on new
 * ones to the same place (keep-alive, a few at once).
 */
export class Upstream {
  private first: Duplex | undefined;
  private h2: ClientHttp2Session | undefined;
  readonly agent: http.Agent;

  constructor(
    socket: Duplex,
    private readonly open: () => Duplex,
  ) {
    if ((socket as Partial<TLSSocket>).alpnProtocol === 'h2') {
      this.h2 = http2.connect('https://upstream', { createConnection: () => socket });
      this.h2.on('error', () => undefined);
    } else this.first = socket;
    const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
    agent.createConnection = () => this.connection();
    this.agent = agent;
  }

  session(): ClientHttp2Session | undefined {
    return this.h2 && !this.h2.closed && !this.h2.destroyed ? this.h2 : undefined;
  }

  /** The connection the guest opened, the first time; a new one after. */
  connection(): Duplex {
    const s = this.first ?? this.open();
    this.first = undefined;
    return s;
  }

  close(): void {
    this.first?.destroy();
    this.h2?.destroy();
    this.agent.destroy();
  }
}

/** Node's raw header list as name-value pairs. */
export const pairs = (raw: string[]): [string, string][] => {
  const out: [string, string][] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) out.push([raw[i], raw[i + 1]]);
  return out;
};

/** Header pairs as an object of lower-case names (repeats as lists), hop-by-hop ones left out. */
export function headerObject(list: [string, string][]): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of list) {
    const key = k.toLowerCase();
    if (HOP.has(key)) continue;
    const had = out[key];
    out[key] = had === undefined ? v : [...(Array.isArray(had) ? had : [had]), v];
  }
  return out;
}
