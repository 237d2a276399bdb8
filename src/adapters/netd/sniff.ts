/**
 * The name a client shows in the first bytes of a connection: the server name of a TLS
 * ClientHello (SNI) or the Host of an HTTP/1 request. Reads only what the client sent; never
 * decrypts anything.
 */
export type Sniffed =
  | {
      kind: 'tls' | 'http';
      name?: string;
      /** The protocols a ClientHello offers (ALPN), in its order. */ alpn?: string[];
    }
  /** Neither TLS nor HTTP (or a protocol whose server speaks first): nothing to check. */
  | { kind: 'other' }
  /** A ClientHello or request head that is not whole yet. */
  | { kind: 'more' };

const METHODS = /^(GET|POST|PUT|DELETE|HEAD|OPTIONS|PATCH|CONNECT|TRACE|PROPFIND) /;

export function sniff(b: Buffer): Sniffed {
  if (b.length === 0) return { kind: 'more' };
  if (b[0] === 0x16) return tls(b);
  const head = b.subarray(0, 16).toString('latin1');
  if (METHODS.test(head)) return http(b);
  // Could a method still be arriving? Only letters so far.
  if (b.length < 8 && /^[A-Z]+$/.test(head)) return { kind: 'more' };
  return { kind: 'other' };
}

function http(b: Buffer): Sniffed {
  const text = b.toString('latin1');
  const end = text.indexOf('\r\n\r\n');
  if (end < 0) return { kind: 'more' };
  const lines = text.slice(0, end).split('\r\n');
  const [method, target] = lines[0].split(' ');
  for (const line of lines.slice(1)) {
    const m = /^host:\s*(.*)$/i.exec(line);
    if (m) return { kind: 'http', name: hostOf(m[1].trim()) };
  }
  // A proxy's CONNECT names its target in the request line.
  if (method === 'CONNECT' && target) return { kind: 'http', name: hostOf(target) };
  const abs = /^[a-z]+:\/\/([^/?#]+)/i.exec(target ?? '');
  return { kind: 'http', name: abs ? hostOf(abs[1]) : undefined };
}

/** `name:port` or `[v6]:port` to its host part. */
function hostOf(hostPort: string): string {
  if (hostPort.startsWith('[')) return hostPort.slice(1, hostPort.indexOf(']') < 0 ? undefined : hostPort.indexOf(']'));
  const colon = hostPort.lastIndexOf(':');
  return colon < 0 ? hostPort : hostPort.slice(0, colon);
}

/** The ClientHello's handshake message, gathered from the records it may span. */
function tls(b: Buffer): Sniffed {
  const msg: Buffer[] = [];
  let have = 0;
  let need = -1;
  for (let off = 0; ;) {
    if (off + 5 > b.length) return { kind: 'more' };
    if (b[off] !== 0x16 || b[off + 1] !== 3) return { kind: 'other' };
    const len = b.readUInt16BE(off + 3);
    if (off + 5 + len > b.length) {
      msg.push(b.subarray(off + 5));
    } else {
      msg.push(b.subarray(off + 5, off + 5 + len));
    }
    have += msg[msg.length - 1].length;
    const m = Buffer.concat(msg);
    if (need < 0 && m.length >= 4) {
      if (m[0] !== 1) return { kind: 'other' }; // not a ClientHello
      need = 4 + m.readUIntBE(1, 3);
    }
    if (need >= 0 && have >= need) return { kind: 'tls', ...helloNames(m.subarray(4, need)) };
    if (off + 5 + len > b.length) return { kind: 'more' };
    off += 5 + len;
  }
}

/** The host_name of the server_name extension (RFC 6066) and the ALPN list (RFC 7301), if the hello has them. */
function helloNames(h: Buffer): { name?: string; alpn?: string[] } {
  const out: { name?: string; alpn?: string[] } = {};
  let i = 2 + 32; // version, random
  const skip = (lenBytes: number) => {
    if (i + lenBytes > h.length) throw new RangeError('short');
    const n = h.readUIntBE(i, lenBytes);
    i += lenBytes + n;
  };
  try {
    skip(1); // session id
    skip(2); // cipher suites
    skip(1); // compression methods
    if (i + 2 > h.length) return out;
    const end = Math.min(h.length, i + 2 + h.readUInt16BE(i));
    i += 2;
    while (i + 4 <= end) {
      const type = h.readUInt16BE(i);
      const len = h.readUInt16BE(i + 2);
      const data = h.subarray(i + 4, i + 4 + len);
      i += 4 + len;
      if (type === 0 && data.length >= 5 && out.name === undefined) out.name = hostNameOf(data);
      if (type === 16 && data.length >= 2) out.alpn = protocolsOf(data);
    }
  } catch {
    return out;
  }
  return out;
}

/** server_name_list: length, then entries of type (0 = host_name), length, name. */
function hostNameOf(data: Buffer): string | undefined {
  let j = 2;
  while (j + 3 <= data.length) {
    const kind = data[j];
    const n = data.readUInt16BE(j + 1);
    const name = data.subarray(j + 3, j + 3 + n);
    if (kind === 0 && name.length === n) return name.toString('latin1');
    j += 3 + n;
  }
  return undefined;
}

/** protocol_name_list: length, then entries of a length byte and the name. */
function protocolsOf(data: Buffer): string[] {
  const list: string[] = [];
  const end = Math.min(data.length, 2 + data.readUInt16BE(0));
  for (let j = 2; j < end && list.length < 16;) {
    const n = data[j];
    if (!n || j + 1 + n > end) break;
    list.push(data.subarray(j + 1, j + 1 + n).toString('latin1'));
    j += 1 + n;
  }
  return list;
}
