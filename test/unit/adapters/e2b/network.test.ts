import { expect } from 'chai';
import { e2bNetworkOf, egressFromE2b, proxyFromE2b, publicTraffic } from '../../../../src/adapters/e2b/network.js';
import { e2bRulesOf, headerRulesFromE2b } from '../../../../src/adapters/e2b/rule-secrets.js';
import { InvalidArgumentError, NotSupportedError } from '../../../../src/domain/errors.js';

describe("E2B's network options as svc's egress policy", () => {
  it('leaves the default policy alone when nothing is asked', () => {
    expect(egressFromE2b(undefined)).to.equal(undefined);
  });

  it('makes a deny of all traffic (or no internet access) a deny by default, its allowed destinations the exceptions', () => {
    expect(
      egressFromE2b({ denyOut: ['0.0.0.0/0', '10.0.0.0/8'], allowOut: ['pypi.org', '*.github.com'] }),
    ).to.deep.equal({
      default: 'deny',
      allow: ['pypi.org', '*.github.com'],
      deny: [],
    });
    expect(egressFromE2b(undefined, false)).to.deep.equal({ default: 'deny', allow: [], deny: [] });
    expect(egressFromE2b({ allowOut: ['1.1.1.1'] }, false)).to.deep.equal({
      default: 'deny',
      allow: ['1.1.1.1'],
      deny: [],
    });
  });

  it('keeps denied blocks as deny rules otherwise, and refuses an allowed address inside one (E2B lets it through, svc would not)', () => {
    expect(egressFromE2b({ denyOut: ['203.0.113.0/24', '198.51.100.7'] }, true)).to.deep.equal({
      default: 'allow',
      allow: [],
      deny: ['203.0.113.0/24', '198.51.100.7'],
    });
    expect(() => egressFromE2b({ allowOut: ['203.0.113.9'], denyOut: ['203.0.113.0/24'] })).to.throw(
      NotSupportedError,
      /allowOut 203\.0\.113\.9 is inside network\.denyOut 203\.0\.113\.0\/24/,
    );
    // A name is decided by what it resolves to: nothing to compare ahead.
    expect(egressFromE2b({ allowOut: ['example.com'], denyOut: ['203.0.113.0/24'] })?.allow).to.deep.equal([
      'example.com',
    ]);
  });

  it('takes a SOCKS5 proxy: its address and username as policy, its password apart (to be kept as a secret)', () => {
    expect(egressFromE2b({ egressProxy: { address: 'p:1080' } })).to.deep.equal({
      default: 'allow',
      allow: [],
      deny: [],
    });
    expect(proxyFromE2b(undefined)).to.equal(undefined);
    expect(proxyFromE2b({ address: 'Proxy.Example.com:1080' })).to.deep.equal({
      proxy: { address: 'proxy.example.com:1080' },
    });
    expect(proxyFromE2b({ address: '[2001:db8::1]:1080', username: 'u', password: 'p w' })).to.deep.equal({
      proxy: { address: '[2001:db8::1]:1080', username: 'u' },
      password: 'p w',
    });
    expect(() => proxyFromE2b({ address: 'p:1080', password: 'x' })).to.throw(
      InvalidArgumentError,
      /only valid together with username/,
    );
    expect(() => proxyFromE2b({ address: 'p:1080', username: 'u', password: 'x'.repeat(256) })).to.throw(
      InvalidArgumentError,
      /at most 255 bytes/,
    );
    expect(() => proxyFromE2b({ address: 'p' })).to.throw(
      InvalidArgumentError,
      /egressProxy.address must be HOST:PORT/,
    );
    expect(() => proxyFromE2b({ address: 'p:1080', secret: 's' })).to.throw(
      InvalidArgumentError,
      /unknown field "secret"/,
    );
    // getInfo shows the address and username, never the password (E2B's API does not either).
    const shown = e2bNetworkOf({
      default: 'allow',
      allow: [],
      deny: [],
      proxy: { address: 'p:1080', username: 'u', secret: 'e2b.aaaaaaaaaaaa.bbbbbbbb' },
    });
    expect(shown.network.egressProxy).to.deep.equal({ address: 'p:1080', username: 'u' });
    expect(JSON.stringify(shown)).not.to.include('e2b.aaaa');
  });

  it('refuses what is malformed, naming the field; rules are not policy', () => {
    expect(egressFromE2b({ rules: { 'a.com': [{ transform: { headers: { A: 'b' } } }] } })).to.deep.equal({
      default: 'allow',
      allow: [],
      deny: [],
    });
    expect(() => egressFromE2b({ denyOut: ['example.com'] })).to.throw(
      InvalidArgumentError,
      /denyOut "example.com": a CIDR/,
    );
    expect(() => egressFromE2b({ allowOut: 'pypi.org' })).to.throw(InvalidArgumentError, /allowOut must be a list/);
    expect(() => egressFromE2b(undefined, 'no')).to.throw(InvalidArgumentError, /allow_internet_access/);
  });

  it("shows svc's policy as E2B's getInfo does", () => {
    expect(e2bNetworkOf({ default: 'deny', allow: ['pypi.org'], deny: [] })).to.deep.equal({
      allowInternetAccess: false,
      network: { allowOut: ['pypi.org'], denyOut: ['0.0.0.0/0'], allowPublicTraffic: true },
    });
    expect(e2bNetworkOf({ default: 'allow', allow: [], deny: ['10.0.0.0/8'] }, true)).to.deep.equal({
      allowInternetAccess: true,
      network: { allowOut: [], denyOut: ['10.0.0.0/8'], allowPublicTraffic: false },
    });
    expect(publicTraffic(undefined)).to.equal(true);
    expect(publicTraffic({ allowPublicTraffic: false })).to.equal(false);
    expect(() => publicTraffic({ allowPublicTraffic: 'no' })).to.throw(InvalidArgumentError, /allowPublicTraffic/);
  });

  it("reads network.rules as the headers they set: one per host and header, the later rule's over the earlier", () => {
    expect(
      headerRulesFromE2b({
        'API.example.com': [
          { transform: { headers: { Authorization: 'Bearer a', 'X-Team': 'a' } } },
          {},
          { transform: { headers: { 'x-team': 'b' } } },
        ],
        '*.example.org': [{ transform: { headers: { 'X-Key': 'k' } } }],
      }),
    ).to.deep.equal([
      { host: 'api.example.com', header: 'Authorization', value: 'Bearer a' },
      { host: 'api.example.com', header: 'x-team', value: 'b' },
      { host: '*.example.org', header: 'X-Key', value: 'k' },
    ]);
    expect(headerRulesFromE2b(undefined)).to.deep.equal([]);
    const rule = (host: string, headers: Record<string, unknown>) => ({ [host]: [{ transform: { headers } }] });
    expect(() => headerRulesFromE2b(rule('*', { A: 'b' }))).to.throw(InvalidArgumentError, /bare "\*"/);
    expect(() => headerRulesFromE2b(rule('10.0.0.0/8', { A: 'b' }))).to.throw(NotSupportedError, /not by address/);
    expect(() => headerRulesFromE2b(rule('x.com', { 'Content-Length': '1' }))).to.throw(/cannot carry a secret/);
    expect(() => headerRulesFromE2b(rule('x.com', { A: 1 }))).to.throw(/one line of text/);
    expect(() => headerRulesFromE2b(rule('x.com:443', { A: 'b' }))).to.throw(/is not a domain name/);
    expect(() => headerRulesFromE2b({ 'x.com': 'no' })).to.throw(/must be a list of rules/);
    const many = Object.fromEntries(
      Array.from({ length: 33 }, (_, i) => [`h${i}.com`, [{ transform: { headers: { A: 'b' } } }]]),
    );
    expect(() => headerRulesFromE2b(many)).to.throw(/at most 32 headers/);
  });

  it("shows a sandbox's rules with their values hidden, and only E2B's", () => {
    const p = (n: number) => `svc-egress-${String(n).repeat(40)}`;
    expect(
      e2bRulesOf([
        { secret: 'e2b.0123456789ab.0a0b0c0d', hosts: ['api.x.com'], header: 'A', always: true, placeholder: p(1) },
        { secret: 'openai', hosts: ['api.x.com'], header: 'B', always: true, placeholder: p(2) },
        { secret: 'e2b.0123456789ab.0a0b0c0e', hosts: ['api.x.com'], header: 'C', placeholder: p(3) },
      ]),
    ).to.deep.equal({ 'api.x.com': [{ transform: { headers: { A: '(kept by svc)' } } }] });
  });
});
