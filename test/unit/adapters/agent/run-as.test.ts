import { expect } from 'chai';
import { startAs } from '../../../../src/adapters/agent/run-as.js';

describe('adapters/agent/run-as', () => {
  const found = () => '/usr/bin/id';

  it('goes through svc-as only for a user in groups beyond its own, with the program found first', () => {
    expect(startAs('/h/svc-as', 'id', ['-G'], { uid: 1000, gid: 1000, groups: [1000, 27, 44] }, found)).to.deep.equal({
      file: '/h/svc-as',
      args: ['1000', '1000', '1000,27,44', '/usr/bin/id', '-G'],
    });
    // a gid of the request's own that is not the user's: its groups still go with it
    expect(startAs('/h/svc-as', 'id', [], { uid: 1000, gid: 5, groups: [1000] }, found).args).to.deep.equal([
      '1000',
      '5',
      '1000',
      '/usr/bin/id',
    ]);
  });

  it("starts as before (spawn's uid and gid) for the agent's own user, a user with no other group, or no svc-as", () => {
    let looked = 0;
    const look = () => {
      looked++;
      return '/usr/bin/id';
    };
    expect(startAs('/h/svc-as', 'id', ['-u'], {}, look)).to.deep.equal({ file: 'id', args: ['-u'] });
    expect(startAs('/h/svc-as', 'id', [], { uid: 7, gid: 7, groups: [7] }, look)).to.deep.equal({
      file: 'id',
      args: [],
      uid: 7,
      gid: 7,
    });
    expect(startAs('/h/svc-as', 'id', [], { uid: 7 }, look)).to.deep.include({ uid: 7, gid: 7 });
    expect(startAs(null, 'id', [], { uid: 7, gid: 7, groups: [7, 27] }, look)).to.deep.include({ file: 'id', uid: 7 });
    expect(looked).to.equal(0);
  });
});
