import { expect } from 'chai';
import { e2bNetworkOf, egressFromE2b, publicTraffic } from '../../../../src/adapters/e2b/network.js';
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

  it('refuses what has no counterpart (header rules, a proxy) and what is malformed, naming the field', () => {
    expect(() => egressFromE2b({ rules: { 'a.com': [{ transform: { headers: { A: 'b' } } }] } })).to.throw(
      NotSupportedError,
      /network\.rules/,
    );
    expect(() => egressFromE2b({ rules: {} })).to.not.throw();
    expect(() => egressFromE2b({ egressProxy: { address: 'p:1080' } })).to.throw(NotSupportedError, /egressProxy/);
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
});
