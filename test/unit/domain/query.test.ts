import { expect } from 'chai';
import { InvalidArgumentError } from '../../../src/domain/errors.js';
import { parseExecQuery } from '../../../src/domain/query.js';

describe('domain/query: the exec query', () => {
  it('takes a user of the guest by name or number, with a gid but not with a uid', () => {
    expect(parseExecQuery({ cmd: 'id', user: 'svc' })).to.deep.include({ cmd: 'id', args: [], user: 'svc' });
    expect(parseExecQuery({ cmd: 'id', user: '1000', gid: '0' })).to.deep.include({ user: '1000', gid: 0 });
    expect(parseExecQuery({ cmd: 'id', uid: '1000' })).to.not.have.property('user');
    expect(() => parseExecQuery({ cmd: 'id', user: 'svc', uid: '1000' }))
      .to.throw(InvalidArgumentError)
      .with.property('message', 'give user or uid, not both');
  });

  it('refuses a user that is no user name, saying what was given', () => {
    for (const bad of ['a b', '../x', 'root;id', '-u', 'x'.repeat(40)])
      expect(() => parseExecQuery({ cmd: 'id', user: bad }), bad)
        .to.throw(InvalidArgumentError)
        .with.property('message')
        .that.matches(/^user must be a user name or number, got "/);
    expect(() => parseExecQuery({ cmd: 'id', user: ['a', 'b'] })).to.throw(/user must be given once/);
  });
});
