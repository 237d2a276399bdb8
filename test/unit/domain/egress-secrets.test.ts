import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import {
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
});
