import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import {
  alwaysFor,
  bindEgressSecrets,
  egressEnv,
  hostMatches,
  parseEgressSecretBindings,
  parseEgressSecretSpecs,
} from '../../../src/domain/egress-secrets.js';

describe('domain/egress-secrets', () => {
  it('reads bindings in their normal form (names lower case, a trailing dot dropped, duplicates once)', () => {
    expect(
      parseEgressSecretSpecs([{ secret: 'k', hosts: ['API.Example.com.', 'api.example.com', '*.Example.org'] }]),
    ).to.deep.equal([{ secret: 'k', hosts: ['api.example.com', '*.example.org'] }]);
  });

  it('matches a wildcard to the names under it only', () => {
    expect(hostMatches('*.example.com', 'a.b.example.com')).to.equal(true);
    expect(hostMatches('*.example.com', 'example.com')).to.equal(false);
    expect(hostMatches('*.example.com', 'badexample.com')).to.equal(false);
    expect(hostMatches('api.example.com', 'API.example.com.')).to.equal(true);
  });

  it('keeps the placeholder of a secret a VM had, makes new ones otherwise, and all new for a copy', () => {
    const first = bindEgressSecrets([{ secret: 'a', hosts: ['x.com'] }], randomBytes);
    const again = bindEgressSecrets(
      [
        { secret: 'a', hosts: ['y.com'] },
        { secret: 'b', hosts: ['x.com'] },
      ],
      randomBytes,
      first,
    );
    expect(again[0].placeholder).to.equal(first[0].placeholder);
    expect(again[1].placeholder)
      .to.match(/^svc-egress-[0-9a-f]{40}$/)
      .and.not.equal(first[0].placeholder);
    const copy = bindEgressSecrets(again, randomBytes, again, true);
    expect(copy.map((b) => b.placeholder)).to.not.include.members(again.map((b) => b.placeholder));
    expect(parseEgressSecretBindings(copy)).to.deep.equal(copy);
    expect(egressEnv(copy)).to.deep.equal({ A: copy[0].placeholder, B: copy[1].placeholder });
  });

  it('refuses a placeholder that is not one when reading bindings back', () => {
    expect(() => parseEgressSecretBindings([{ secret: 'a', hosts: ['x.com'], placeholder: 'sk-real' }])).to.throw(
      /is not a placeholder/,
    );
  });

  it('takes an always binding only with a header and without a variable, and sets none in the guest', () => {
    expect(() => parseEgressSecretSpecs([{ secret: 'a', hosts: ['x.com'], always: true }])).to.throw(/needs a header/);
    expect(() =>
      parseEgressSecretSpecs([{ secret: 'a', hosts: ['x.com'], header: 'X-K', always: true, env: 'A' }]),
    ).to.throw(/no placeholder in the guest/);
    expect(() => parseEgressSecretSpecs([{ secret: 'a', hosts: ['x.com'], header: 'X-K', always: 'yes' }])).to.throw(
      /true or false/,
    );
    const [b] = bindEgressSecrets(
      parseEgressSecretSpecs([{ secret: 'a', hosts: ['x.com'], header: 'X-K', always: true }]),
      randomBytes,
    );
    expect(b).to.include({ always: true, header: 'X-K' });
    expect(parseEgressSecretBindings([b])).to.deep.equal([b]);
    expect(egressEnv([b])).to.deep.equal({});
  });

  it('gives a request the always bindings of the most specific pattern only (exact, then the longest suffix)', () => {
    const bound = bindEgressSecrets(
      [
        { secret: 'exact', hosts: ['api.example.com'], header: 'A', always: true },
        { secret: 'near', hosts: ['*.api.example.com'], header: 'B', always: true },
        { secret: 'far', hosts: ['*.example.com'], header: 'C', always: true },
        { secret: 'far2', hosts: ['*.example.com'], header: 'D', always: true },
        { secret: 'placeholder', hosts: ['api.example.com'] },
      ],
      randomBytes,
    );
    const names = (host: string) => alwaysFor(bound, host).map((b) => b.secret);
    expect(names('API.example.com')).to.deep.equal(['exact']);
    expect(names('v1.api.example.com')).to.deep.equal(['near']);
    expect(names('www.example.com')).to.deep.equal(['far', 'far2']);
    expect(names('example.com')).to.deep.equal([]);
    expect(names('example.org')).to.deep.equal([]);
  });
});
