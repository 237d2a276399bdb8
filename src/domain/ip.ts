/**
 * IP addresses as numbers, parsed strictly (no octal or hex quads, no zone ids), so that a rule and
 * an address compare by value whatever way they were written. IPv4-mapped IPv6 (`::ffff:1.2.3.4`)
 * is the IPv4 address it maps.
 */
export interface IpAddr {
  family: 4 | 6;
  /** 32 bits for IPv4, 128 for IPv6. */
  value: bigint;
}

const V4_QUAD = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;

export function parseIPv4(text: string): IpAddr | undefined {
  const parts = text.split('.');
  if (parts.length !== 4 || !parts.every((p) => V4_QUAD.test(p))) return undefined;
  return { family: 4, value: parts.reduce((acc, p) => (acc << 8n) | BigInt(Number(p)), 0n) };
}

function parseIPv6(text: string): IpAddr | undefined {
  if (!/^[0-9a-fA-F:.]+$/.test(text) || text.length > 45) return undefined;
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const groups = (s: string): number[] | undefined => {
    if (s === '') return [];
    const out: number[] = [];
    const parts = s.split(':');
    for (let i = 0; i < parts.length; i++) {
      const p = parts[i];
      if (i === parts.length - 1 && p.includes('.')) {
        const v4 = parseIPv4(p);
        if (!v4) return undefined;
        out.push(Number(v4.value >> 16n), Number(v4.value & 0xffffn));
      } else if (/^[0-9a-fA-F]{1,4}$/.test(p)) {
        out.push(parseInt(p, 16));
      } else {
        return undefined;
      }
    }
    return out;
  };
  const head = groups(halves[0]);
  const tail = halves.length === 2 ? groups(halves[1]) : [];
  if (!head || !tail) return undefined;
  const missing = 8 - head.length - tail.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return undefined;
  const all = [...head, ...new Array<number>(halves.length === 2 ? missing : 0).fill(0), ...tail];
  const value = all.reduce((acc, g) => (acc << 16n) | BigInt(g), 0n);
  // ::ffff:a.b.c.d is an IPv4 address written as IPv6.
  if (value >> 32n === 0xffffn) return { family: 4, value: value & 0xffffffffn };
  return { family: 6, value };
}

/** An IPv4 or IPv6 address, or undefined when `text` is neither. */
export function parseIp(text: string): IpAddr | undefined {
  return text.includes(':') ? parseIPv6(text) : parseIPv4(text);
}

export function formatIp(ip: IpAddr): string {
  if (ip.family === 4) return [24n, 16n, 8n, 0n].map((s) => String((ip.value >> s) & 0xffn)).join('.');
  const groups = Array.from({ length: 8 }, (_, i) => Number((ip.value >> BigInt(112 - 16 * i)) & 0xffffn));
  // The longest run of two or more zero groups becomes `::` (RFC 5952).
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best < 0) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLen).join(':')}`;
}

/** An address block: `bits` leading bits of `base` (the rest zero). */
export interface Cidr {
  family: 4 | 6;
  base: bigint;
  bits: number;
}

const width = (family: 4 | 6) => (family === 4 ? 32 : 128);

/** `a.b.c.d/n`, `x::y/n`, or a single address (a /32 or /128). Host bits are cleared. */
export function parseCidr(text: string): Cidr | undefined {
  const slash = text.indexOf('/');
  const ip = parseIp(slash < 0 ? text : text.slice(0, slash));
  if (!ip) return undefined;
  const w = width(ip.family);
  let bits = w;
  if (slash >= 0) {
    const b = text.slice(slash + 1);
    if (!/^\d{1,3}$/.test(b)) return undefined;
    bits = Number(b);
    // An IPv4-mapped block keeps its meaning as IPv4 (::ffff:10.0.0.0/104 is 10.0.0.0/8).
    if (ip.family === 4 && text.slice(0, slash).includes(':')) bits -= 96;
    if (bits < 0 || bits > w) return undefined;
  }
  return { family: ip.family, base: ip.value & mask(ip.family, bits), bits };
}

function mask(family: 4 | 6, bits: number): bigint {
  const w = BigInt(width(family));
  return bits === 0 ? 0n : ((1n << w) - 1n) ^ ((1n << (w - BigInt(bits))) - 1n);
}

export function cidrContains(c: Cidr, ip: IpAddr): boolean {
  return c.family === ip.family && (ip.value & mask(c.family, c.bits)) === c.base;
}

export function formatCidr(c: Cidr): string {
  const addr = formatIp({ family: c.family, value: c.base });
  return c.bits === width(c.family) ? addr : `${addr}/${c.bits}`;
}

/**
 * Address blocks a guest does not reach by default: the private, shared and link-local (cloud
 * metadata) ranges, which a block rule may open (`closed`), and the host's loopback, "this
 * network", multicast and reserved ranges, which nothing opens (`never`: the host's loopback ports
 * are reached through `host:PORT` rules only). The host's own addresses are added by whoever knows
 * them (the network process).
 */
export const SPECIAL_RANGES: readonly { cidr: Cidr; why: string; never: boolean }[] = [
  ['0.0.0.0/8', 'this-network', true],
  ['10.0.0.0/8', 'private', false],
  ['100.64.0.0/10', 'private', false],
  ['127.0.0.0/8', 'loopback', true],
  ['169.254.0.0/16', 'link-local', false],
  ['172.16.0.0/12', 'private', false],
  ['192.168.0.0/16', 'private', false],
  ['224.0.0.0/4', 'multicast', true],
  ['240.0.0.0/4', 'reserved', true],
  ['::/128', 'this-network', true],
  ['::1/128', 'loopback', true],
  ['fc00::/7', 'private', false],
  ['fe80::/10', 'link-local', false],
  ['ff00::/8', 'multicast', true],
].map(([c, why, never]) => ({ cidr: parseCidr(c as string)!, why: why as string, never: never as boolean }));

/** The special range `ip` is in (`private`, `link-local`, ...), or undefined for a public address. */
export function specialRange(ip: IpAddr): { why: string; never: boolean } | undefined {
  const r = SPECIAL_RANGES.find((x) => cidrContains(x.cidr, ip));
  return r && { why: r.why, never: r.never };
}
