/**
 * Just enough of DNS (RFC 1035) for a resolver that decides by name: the question of a query,
 * the IPv4 answers of a response, and the answers it makes itself (the host's name, a refusal).
 * Names may be compressed; a pointer loop or a name past the message ends the read.
 */

export const TYPE_A = 1;
export const TYPE_AAAA = 28;
const TYPE_OPT = 41;
const CLASS_IN = 1;
export const RCODE_NXDOMAIN = 3;
/** Extended DNS Error (RFC 8914) info code 15: "Blocked" by the resolver's operator. */
const EDE_BLOCKED = 15;

export class BadDns extends Error {}

export interface Question {
  id: number;
  /** Lower case, no trailing dot. */
  name: string;
  type: number;
  /** Bytes of the question section, copied into an answer as they came. */
  raw: Buffer;
  /** The query carried an OPT record (EDNS): an answer may carry one with an extended error. */
  edns: boolean;
  /** Recursion desired, copied into the answer. */
  rd: boolean;
}

/** Reads a name at `off`; returns it and the offset just past it where it started. */
function readName(m: Buffer, off: number): { name: string; end: number } {
  const labels: string[] = [];
  let end = -1;
  let jumps = 0;
  let len = 0;
  for (;;) {
    if (off >= m.length) throw new BadDns('name runs past the message');
    const n = m[off];
    if ((n & 0xc0) === 0xc0) {
      if (off + 1 >= m.length || ++jumps > 32) throw new BadDns('bad compression pointer');
      if (end < 0) end = off + 2;
      off = ((n & 0x3f) << 8) | m[off + 1];
      continue;
    }
    if (n & 0xc0) throw new BadDns('bad label');
    if (n === 0) {
      if (end < 0) end = off + 1;
      break;
    }
    if (off + 1 + n > m.length) throw new BadDns('label runs past the message');
    labels.push(m.subarray(off + 1, off + 1 + n).toString('latin1'));
    len += n + 1;
    if (len > 255) throw new BadDns('name too long');
    off += 1 + n;
  }
  return { name: labels.join('.').toLowerCase(), end };
}

/** The first (and only, in practice) question of a query. BadDns when it is not a query with one. */
export function readQuestion(m: Buffer): Question {
  if (m.length < 12) throw new BadDns('short message');
  const flags = m.readUInt16BE(2);
  if (flags & 0x8000) throw new BadDns('not a query');
  if (m.readUInt16BE(4) !== 1) throw new BadDns('one question expected');
  const { name, end } = readName(m, 12);
  if (end + 4 > m.length) throw new BadDns('short question');
  const q: Question = {
    id: m.readUInt16BE(0),
    name,
    type: m.readUInt16BE(end),
    raw: Buffer.from(m.subarray(12, end + 4)),
    edns: false,
    rd: (flags & 0x0100) !== 0,
  };
  // An OPT record among the additional ones (usually the only one).
  let off = end + 4;
  const skip = m.readUInt16BE(6) + m.readUInt16BE(8);
  const extra = m.readUInt16BE(10);
  try {
    for (let i = 0; i < skip + extra; i++) {
      const rr = readName(m, off);
      if (rr.end + 10 > m.length) break;
      const type = m.readUInt16BE(rr.end);
      if (i >= skip && type === TYPE_OPT) q.edns = true;
      off = rr.end + 10 + m.readUInt16BE(rr.end + 8);
    }
  } catch {
    // a broken additional section costs only the extended error
  }
  return q;
}

export interface Answer {
  /** IPv4 addresses in the answer section, dotted. */
  a: string[];
  /** The smallest TTL among them, in seconds. */
  ttl: number;
}

/** The IPv4 addresses a response gives (whatever names they hang off: a CNAME chain leads to them). */
export function readAnswers(m: Buffer): Answer {
  if (m.length < 12) throw new BadDns('short message');
  const qd = m.readUInt16BE(4);
  const an = m.readUInt16BE(6);
  let off = 12;
  for (let i = 0; i < qd; i++) off = readName(m, off).end + 4;
  const out: Answer = { a: [], ttl: Infinity };
  for (let i = 0; i < an; i++) {
    const rr = readName(m, off);
    if (rr.end + 10 > m.length) throw new BadDns('short record');
    const type = m.readUInt16BE(rr.end);
    const klass = m.readUInt16BE(rr.end + 2);
    const ttl = m.readUInt32BE(rr.end + 4);
    const len = m.readUInt16BE(rr.end + 8);
    const data = rr.end + 10;
    if (data + len > m.length) throw new BadDns('record runs past the message');
    if (type === TYPE_A && klass === CLASS_IN && len === 4) {
      out.a.push(`${m[data]}.${m[data + 1]}.${m[data + 2]}.${m[data + 3]}`);
      out.ttl = Math.min(out.ttl, ttl);
    }
    off = data + len;
  }
  if (!out.a.length) out.ttl = 0;
  return out;
}

/** The response code of a response. */
export const rcodeOf = (m: Buffer) => (m.length >= 4 ? m[3] & 0x0f : -1);

function header(q: Question, rcode: number, answers: number, additional: number): Buffer {
  const h = Buffer.alloc(12);
  h.writeUInt16BE(q.id, 0);
  h.writeUInt16BE(0x8000 | 0x0400 | (q.rd ? 0x0100 : 0) | 0x0080 | rcode, 2); // QR, AA, RD as asked, RA
  h.writeUInt16BE(1, 4);
  h.writeUInt16BE(answers, 6);
  h.writeUInt16BE(additional, 10);
  return h;
}

/** An answer made here: the question with IPv4 `addresses` (none: NOERROR with no data). */
export function answerWith(q: Question, addresses: number[], ttl: number): Buffer {
  const rrs = addresses.map((ip) => {
    const rr = Buffer.alloc(16);
    rr.writeUInt16BE(0xc00c, 0); // the question's name
    rr.writeUInt16BE(TYPE_A, 2);
    rr.writeUInt16BE(CLASS_IN, 4);
    rr.writeUInt32BE(ttl, 6);
    rr.writeUInt16BE(4, 10);
    rr.writeUInt32BE(ip >>> 0, 12);
    return rr;
  });
  return Buffer.concat([header(q, 0, rrs.length, 0), q.raw, ...rrs]);
}

/**
 * A refusal by policy: NXDOMAIN, so programs fail at once with "not known" rather than retry a
 * "temporary" failure, and, when the query spoke EDNS, an Extended DNS Error "Blocked" that says why.
 */
export function blocked(q: Question, why: string): Buffer {
  if (!q.edns) return Buffer.concat([header(q, RCODE_NXDOMAIN, 0, 0), q.raw]);
  const text = Buffer.from(why.slice(0, 200), 'utf8');
  const opt = Buffer.alloc(11 + 6 + text.length);
  opt[0] = 0; // root name
  opt.writeUInt16BE(TYPE_OPT, 1);
  opt.writeUInt16BE(1232, 3); // our UDP payload size
  opt.writeUInt32BE(0, 5);
  opt.writeUInt16BE(6 + text.length, 9);
  opt.writeUInt16BE(15, 11); // option code: Extended DNS Error
  opt.writeUInt16BE(2 + text.length, 13);
  opt.writeUInt16BE(EDE_BLOCKED, 15);
  text.copy(opt, 17);
  return Buffer.concat([header(q, RCODE_NXDOMAIN, 0, 1), q.raw, opt]);
}
