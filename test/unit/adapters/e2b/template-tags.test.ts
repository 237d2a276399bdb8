import { expect } from 'chai';
import { checkTags, parseRef } from '../../../../src/adapters/e2b/template-tags.js';

describe('E2B template tags: references and tag names', () => {
  it('reads name, name:tag and name:<build id>, a name alone meaning its default tag', () => {
    expect(parseRef('app')).to.deep.equal({ name: 'app', tag: 'default' });
    expect(parseRef('app:v1.2')).to.deep.equal({ name: 'app', tag: 'v1.2' });
    expect(parseRef('app:')).to.deep.equal({ name: 'app', tag: 'default' });
    expect(parseRef('tpl-0123456789abcdef:0a1b2c3d4e5f6a7b')).to.deep.equal({
      name: 'tpl-0123456789abcdef',
      tag: '0a1b2c3d4e5f6a7b',
    });
    // the tag is after the last colon: a name never holds one (NAME in templates.ts)
    expect(parseRef('a:b:c')).to.deep.equal({ name: 'a:b', tag: 'c' });
  });

  it('takes a tag or a list of them, each once, and refuses what is not a tag', () => {
    expect(checkTags('prod')).to.deep.equal(['prod']);
    expect(checkTags(['v1', 'latest', 'v1'])).to.deep.equal(['v1', 'latest']);
    expect(checkTags([])).to.deep.equal([]);
    for (const bad of [['../x'], ['a b'], [''], ['-lead'], [5], ['x'.repeat(129)]])
      expect(() => checkTags(bad), JSON.stringify(bad)).to.throw(/tag .*letters, digits/);
    expect(() => checkTags({ tag: 'x' })).to.throw(/list of at most 50/);
    expect(() => checkTags(Array.from({ length: 51 }, (_, i) => `t${i}`))).to.throw(/at most 50/);
  });
});
