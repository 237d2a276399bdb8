import { expect } from 'chai';
import fc from 'fast-check';
import {
  EgressRules,
  parseEgressPolicy,
  parseEgressProxy,
  parseEgressRule,
  type EgressPolicy,
} from '../../../src/domain/egress.js';
import { InvalidArgumentError } from '../../../src/domain/errors.js';
import { cidrContains, formatIp, parseCidr, parseIp, type IpAddr } from '../../../src/domain/ip.js';

const runs = Number(process.env.SVC_FUZZ_RUNS ?? 300);
const v4 = (n: number): IpAddr => ({ family: 4, value: BigInt(n >>> 0) });
const quad = (n: number) => formatIp(v4(n));
const none = () => false;
const rules = (p: Partial<EgressPolicy>) => new EgressRules(parseEgressPolicy(p));
const tcp = (ip: string, port: number, names: string[] = []) => ({
  ip: parseIp(ip)!,
  port,
  proto: 'tcp' as const,
  names,
});

describe('domain/egress', () => {
  it('parses every rule form into its normal text', () => {
    const cases: [string, string, string][] = [
      ['PyPI.org.', 'domain', 'pypi.org'],
      ['*.GitHub.com', 'domain', '*.github.com'],
      ['api.example.com:8443', 'domain', 'api.example.com:8443'],
      ['10.1.2.3', 'cidr', '10.1.2.3'],
      ['10.1.2.3:5432', 'cidr', '10.1.2.3:5432'],
      ['10.1.2.3/8', 'cidr', '10.0.0.0/8'],
      ['10.0.0.0/8:5432', 'cidr', '10.0.0.0/8:5432'],
      ['2001:DB8::1', 'cidr', '2001:db8::1'],
      ['2001:db8:0:0:0:0:0:0/32', 'cidr', '2001:db8::/32'],
      ['[2001:db8::1]:443', 'cidr', '[2001:db8::1]:443'],
      ['[2001:db8::/32]:443', 'cidr', '[2001:db8::/32]:443'],
      ['::ffff:10.1.2.3', 'cidr', '10.1.2.3'],
      ['::ffff:10.0.0.0/104', 'cidr', '10.0.0.0/8'],
      ['host:5432', 'host', 'host:5432'],
      ['HOST:80', 'host', 'host:80'],
    ];
    for (const [raw, kind, text] of cases) {
      const r = parseEgressRule(raw);
      expect(r.kind, raw).to.equal(kind);
      expect(r.text, raw).to.equal(text);
    }
  });

  it('refuses what is none of the forms, naming the rule', () => {
    for (const bad of [
      '',
      ' ',
      'host:0',
      'host:70000',
      'host:',
      'a..b',
      '-a.com',
      'a-.com',
      '*.',
      '10.0.0.256',
      '10.0.0.0/33',
      '1.2.3.4:0',
      '2001:db8::1:443:1:1:1:1:1',
      '[2001:db8::1]:99999',
      '[nonsense]:80',
      'a b.com',
      'exa$mple.com',
      '1.2.3',
      'host.svc.internal',
      'x'.repeat(301),
      7,
      null,
    ]) {
      expect(() => parseEgressRule(bad), String(bad)).to.throw(InvalidArgumentError);
    }
  });

  it('validates a policy: fields, default, lists; drops duplicates', () => {
    expect(parseEgressPolicy({})).to.deep.equal({ default: 'allow', allow: [], deny: [] });
    expect(parseEgressPolicy({ default: 'deny', allow: ['a.com', 'A.com.', 'host:80'] })).to.deep.equal({
      default: 'deny',
      allow: ['a.com', 'host:80'],
      deny: [],
    });
    expect(() => parseEgressPolicy({ default: 'maybe' })).to.throw(/default must be "allow" or "deny"/);
    expect(() => parseEgressPolicy({ alow: [] })).to.throw(/unknown field "alow"/);
    expect(() => parseEgressPolicy({ allow: 'a.com' })).to.throw(/allow must be an array/);
    expect(() => parseEgressPolicy({ deny: ['a.com', 'not a rule'] })).to.throw(
      /egress.deny: egress rule "not a rule"/,
    );
    expect(() => parseEgressPolicy({ allow: Array.from({ length: 1001 }, (_, i) => `h${i}.com`) })).to.throw(
      /at most 1000/,
    );
    expect(() => parseEgressPolicy([])).to.throw(/must be an object/);
  });

  it('validates a SOCKS5 proxy: HOST:PORT, a username, a password only as a secret with a username', () => {
    expect(parseEgressPolicy({ proxy: { address: ' Socks.Example.COM:1080 ' } }).proxy).to.deep.equal({
      address: 'socks.example.com:1080',
    });
    expect(parseEgressProxy({ address: '10.1.2.3:1080', username: 'me', secret: 'proxy-pw' })).to.deep.equal({
      address: '10.1.2.3:1080',
      username: 'me',
      secret: 'proxy-pw',
    });
    expect(parseEgressProxy({ address: '[::1]:9050' }).address).to.equal('[::1]:9050');
    expect(parseEgressPolicy({ proxy: null })).to.deep.equal({ default: 'allow', allow: [], deny: [] });
    for (const [bad, why] of [
      [{ address: 'nohost' }, /must be HOST:PORT/],
      [{ address: 'h:0' }, /must be HOST:PORT/],
      [{ address: 'h:65536' }, /must be HOST:PORT/],
      [{ address: '::1:80' }, /must be HOST:PORT/],
      [{ address: '300.1.1.1:80' }, /not a host name or an IP address/],
      [{ address: '[nothex]:80' }, /must be HOST:PORT/],
      [{ address: 'a..b:80' }, /not a host name/],
      [{ address: 'h:80', secret: 'pw' }, /needs a username/],
      [{ address: 'h:80', username: '' }, /username must be 1-255 bytes/],
      [{ address: 'h:80', username: 'x'.repeat(256) }, /username must be 1-255 bytes/],
      [{ address: 'h:80', username: 'a\nb' }, /username must be 1-255 bytes/],
      [{ address: 'h:80', username: 'u', secret: '../x' }, /proxy.secret/],
      [{ address: 'h:80', password: 'x' }, /unknown field "password"/],
      ['h:80', /must be an object/],
    ] as const)
      expect(() => parseEgressProxy(bad), JSON.stringify(bad)).to.throw(InvalidArgumentError, why);
  });

  it('normal form is a fixed point (property)', () => {
    const label = fc.stringMatching(/^[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?$/);
    const domain = fc
      .tuple(
        fc.boolean(),
        fc.array(label, { minLength: 1, maxLength: 3 }),
        fc.constantFrom('com', 'org', 'dev'),
        fc.option(fc.integer({ min: 1, max: 65535 }), { nil: undefined }),
      )
      .map(([wild, ls, tld, port]) => `${wild ? '*.' : ''}${[...ls, tld].join('.')}${port ? `:${port}` : ''}`);
    const cidr4 = fc
      .tuple(fc.integer({ min: 0, max: 0xffffffff }), fc.integer({ min: 0, max: 32 }))
      .map(([a, n]) => `${quad(a)}/${n}`);
    const rule = fc.oneof(
      domain,
      cidr4,
      fc.integer({ min: 1, max: 65535 }).map((p) => `host:${p}`),
    );
    fc.assert(
      fc.property(
        fc.array(rule, { maxLength: 8 }),
        fc.array(rule, { maxLength: 8 }),
        fc.constantFrom('allow', 'deny'),
        (allow, deny, def) => {
          const once = parseEgressPolicy({ default: def, allow, deny });
          expect(parseEgressPolicy(once)).to.deep.equal(once);
        },
      ),
      { numRuns: runs },
    );
  });

  it('an IPv4 block holds exactly the addresses that share its first bits (property)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 0xffffffff }),
        fc.integer({ min: 0, max: 0xffffffff }),
        fc.integer({ min: 0, max: 32 }),
        (base, addr, bits) => {
          const c = parseCidr(`${quad(base)}/${bits}`)!;
          const shift = BigInt(32 - bits);
          const same = bits === 0 || BigInt(base >>> 0) >> shift === BigInt(addr >>> 0) >> shift;
          expect(cidrContains(c, v4(addr))).to.equal(same);
          // The same address written as IPv4-mapped IPv6 is the same address.
          expect(cidrContains(c, parseIp(`::ffff:${quad(addr)}`)!)).to.equal(same);
        },
      ),
      { numRuns: runs },
    );
  });

  it('IPv6 addresses read back from how they are written, any way (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: 8, maxLength: 8 }), (groups) => {
        const value = groups.reduce((acc, g) => (acc << 16n) | BigInt(g), 0n);
        const full = groups.map((g) => g.toString(16)).join(':');
        const parsed = parseIp(full)!;
        const text = formatIp(parsed);
        expect(parseIp(text), text).to.deep.equal(parsed);
        if (value >> 32n === 0xffffn) expect(parsed.family).to.equal(4);
        else expect(parsed).to.deep.equal({ family: 6, value });
        expect(parseIp(full.toUpperCase())).to.deep.equal(parsed);
      }),
      { numRuns: runs },
    );
  });

  it('a wildcard names every name under it and not the name itself (property)', () => {
    const label = fc.stringMatching(/^[a-z][a-z0-9]{0,6}$/);
    fc.assert(
      fc.property(
        fc.array(label, { minLength: 1, maxLength: 3 }),
        fc.array(label, { minLength: 1, maxLength: 3 }),
        (base, sub) => {
          const apex = `${base.join('.')}.com`;
          const r = rules({ default: 'deny', allow: [`*.${apex}`] });
          expect(r.resolve(`${sub.join('.')}.${apex}`).allow).to.equal(true);
          expect(r.resolve(apex).allow).to.equal(false);
          expect(r.resolve(`x${apex}`).allow).to.equal(false);
          expect(r.resolve(`${sub.join('.')}.${apex}.evil.org`).allow).to.equal(false);
        },
      ),
      { numRuns: runs },
    );
  });

  it('resolves: the host name always, deny rules first, then allow rules, then the default', () => {
    const r = rules({ default: 'allow', deny: ['evil.com', '*.ads.net', 'mail.com:25'], allow: ['api.evil.com'] });
    expect(r.resolve('host.svc.internal')).to.include({ allow: true });
    expect(r.resolve('EVIL.com.')).to.deep.equal({ allow: false, rule: 'evil.com' });
    expect(r.resolve('x.ads.net')).to.deep.equal({ allow: false, rule: '*.ads.net' });
    expect(r.resolve('mail.com'), 'a deny rule with a port still resolves').to.include({ allow: true });
    expect(r.resolve('api.evil.com')).to.deep.equal({ allow: true, rule: 'api.evil.com' });
    expect(r.resolve('good.org')).to.deep.equal({ allow: true, rule: 'default' });
    expect(rules({ default: 'deny', allow: ['pypi.org:443'] }).resolve('pypi.org')).to.deep.equal({
      allow: true,
      rule: 'pypi.org:443',
    });
    expect(rules({ default: 'deny' }).resolve('pypi.org')).to.deep.equal({ allow: false, rule: 'default' });
  });

  it('opens a host loopback port only when a rule names it', () => {
    const r = rules({ default: 'allow', allow: ['host:8080', 'host:9000'], deny: ['host:9000'] });
    expect(r.hostPort(8080)).to.deep.equal({ allow: true, rule: 'host:8080' });
    expect(r.hostPort(9000)).to.deep.equal({ allow: false, rule: 'host:9000' });
    expect(r.hostPort(7474)).to.deep.equal({ allow: false, rule: 'host-closed' });
  });

  it('connects: deny rules, DNS elsewhere, blocks, names (TCP only), special ranges, the default', () => {
    const host = (ip: IpAddr) => formatIp(ip) === '192.0.2.2';
    const allowMode = rules({
      default: 'allow',
      deny: ['203.0.113.0/24:25', 'evil.com'],
      allow: ['10.1.0.0/16', 'corp.internal', '8.8.8.8:53'],
    });
    expect(allowMode.connect(tcp('203.0.113.9', 25), host)).to.deep.equal({ allow: false, rule: '203.0.113.0/24:25' });
    expect(allowMode.connect(tcp('203.0.113.9', 80), host)).to.deep.equal({ allow: true, rule: 'default' });
    expect(allowMode.connect(tcp('198.51.100.7', 443, ['evil.com']), host)).to.deep.equal({
      allow: false,
      rule: 'evil.com',
    });
    expect(allowMode.connect(tcp('1.1.1.1', 53), host)).to.deep.equal({ allow: false, rule: 'dns-elsewhere' });
    expect(allowMode.connect(tcp('1.1.1.1', 853), host)).to.deep.equal({ allow: false, rule: 'dns-elsewhere' });
    expect(allowMode.connect({ ...tcp('8.8.8.8', 53), proto: 'udp' }, host)).to.deep.equal({
      allow: true,
      rule: '8.8.8.8:53',
    });
    expect(allowMode.connect(tcp('10.1.2.3', 22), host)).to.deep.equal({ allow: true, rule: '10.1.0.0/16' });
    expect(allowMode.connect(tcp('10.2.2.3', 22), host)).to.deep.equal({ allow: false, rule: 'private' });
    expect(
      allowMode.connect(tcp('10.9.9.9', 443, ['corp.internal']), host),
      'a name does not open a private range',
    ).to.deep.equal({ allow: false, rule: 'private' });
    expect(allowMode.connect(tcp('93.184.216.34', 443, ['corp.internal']), host)).to.deep.equal({
      allow: true,
      rule: 'corp.internal',
      byName: true,
    });
    expect(
      allowMode.connect({ ...tcp('93.184.216.34', 443, ['corp.internal']), proto: 'udp' }, host),
      'names open TCP only',
    ).to.deep.equal({ allow: true, rule: 'default' });
    expect(allowMode.connect(tcp('169.254.169.254', 80), host)).to.deep.equal({ allow: false, rule: 'link-local' });
    expect(allowMode.connect(tcp('127.0.0.1', 80), host)).to.deep.equal({ allow: false, rule: 'loopback' });
    const opened = rules({ default: 'deny', allow: ['127.0.0.0/8', '0.0.0.0/0', 'evil.com', '192.0.2.2:5432'] });
    expect(
      opened.connect(tcp('127.0.0.1', 80, ['evil.com']), host),
      "nothing opens the host's loopback but host:PORT",
    ).to.deep.equal({ allow: false, rule: 'loopback' });
    expect(opened.connect(tcp('224.0.0.1', 80), host)).to.deep.equal({ allow: false, rule: 'multicast' });
    expect(opened.connect(tcp('192.0.2.2', 5432), host), "a block rule opens the host's address").to.deep.equal({
      allow: true,
      rule: '0.0.0.0/0',
    });
    expect(rules({ allow: ['192.0.2.2:5432'] }).connect(tcp('192.0.2.2', 5432), host)).to.deep.equal({
      allow: true,
      rule: '192.0.2.2:5432',
    });
    expect(rules({ allow: ['192.0.2.2:5432'] }).connect(tcp('192.0.2.2', 22), host)).to.deep.equal({
      allow: false,
      rule: 'host-address',
    });
    expect(
      rules({ default: 'deny', allow: ['evil.com'] }).connect(tcp('192.0.2.2', 80, ['evil.com']), host),
      'a name does not',
    ).to.deep.equal({ allow: false, rule: 'host-address' });
    expect(allowMode.connect(tcp('192.0.2.2', 80), host)).to.deep.equal({ allow: false, rule: 'host-address' });
    expect(allowMode.connect(tcp('::ffff:169.254.169.254', 80), host)).to.deep.equal({
      allow: false,
      rule: 'link-local',
    });
    expect(allowMode.connect(tcp('fe80::1', 80), host)).to.deep.equal({ allow: false, rule: 'link-local' });
    expect(allowMode.connect(tcp('fd00::1', 80), host)).to.deep.equal({ allow: false, rule: 'private' });
    expect(allowMode.connect(tcp('2001:db8::1', 80), host)).to.deep.equal({ allow: true, rule: 'default' });
    const denyMode = rules({ default: 'deny', allow: ['pypi.org:443', '[2001:db8::/32]:443'] });
    expect(denyMode.connect(tcp('151.101.0.223', 443, ['pypi.org']), none)).to.deep.equal({
      allow: true,
      rule: 'pypi.org:443',
      byName: true,
    });
    expect(denyMode.connect(tcp('151.101.0.223', 80, ['pypi.org']), none)).to.deep.equal({
      allow: false,
      rule: 'default',
    });
    expect(denyMode.connect(tcp('151.101.0.223', 443), none), 'an address no allowed name gave').to.deep.equal({
      allow: false,
      rule: 'default',
    });
    expect(denyMode.connect(tcp('2001:db8:1::9', 443), none)).to.deep.equal({
      allow: true,
      rule: '[2001:db8::/32]:443',
    });
    expect(denyMode.connect(tcp('2001:db8:1::9', 80), none)).to.deep.equal({ allow: false, rule: 'default' });
  });

  it('checks the name a connection shows against the rules', () => {
    const r = rules({ default: 'deny', allow: ['*.github.com'], deny: ['gist.github.com'] });
    const byName = r.connect(tcp('140.82.112.3', 443, ['api.github.com']), none);
    expect(byName).to.include({ allow: true, byName: true });
    expect(r.shown('raw.github.com', 443, byName)).to.include({ allow: true });
    expect(r.shown('evil.com', 443, byName)).to.deep.equal({ allow: false, rule: 'name-mismatch' });
    expect(r.shown('gist.github.com', 443, byName)).to.deep.equal({ allow: false, rule: 'gist.github.com' });
    const byDefault = rules({ default: 'allow', deny: ['evil.com'] });
    const d = byDefault.connect(tcp('1.2.3.4', 443), none);
    expect(byDefault.shown('fine.org', 443, d)).to.deep.equal(d);
    expect(byDefault.shown('EVIL.com', 443, d)).to.deep.equal({ allow: false, rule: 'evil.com' });
    expect(byDefault.deniedNames()).to.deep.equal(['evil.com']);
  });

  it('ports: a rule with a port opens or closes only that port (property)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 0xffffffff }),
        fc.integer({ min: 1, max: 65535 }),
        fc.integer({ min: 1, max: 65535 }),
        (a, p, q) => {
          fc.pre(q !== 53 && q !== 853);
          const ip = quad(a);
          fc.pre(
            !['0', '10', '127', '169', '172', '192', '100'].includes(ip.split('.')[0]) &&
              Number(ip.split('.')[0]) < 224,
          );
          const r = rules({ default: 'deny', allow: [`${ip}:${p}`] });
          expect(r.connect(tcp(ip, q), none).allow).to.equal(p === q);
        },
      ),
      { numRuns: runs },
    );
  });
});
