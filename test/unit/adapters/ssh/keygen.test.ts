import { expect } from 'chai';
import ssh2 from 'ssh2';
import { generateEd25519 } from '../../../../src/adapters/ssh/keygen.js';

describe('adapters/ssh/keygen', () => {
  it('only hands out keys ssh2 can parse (some it generates, it cannot)', function () {
    this.timeout(20_000);
    for (let i = 0; i < 1500; i++) {
      const kp = generateEd25519('svcd');
      expect(ssh2.utils.parseKey(kp.private)).not.to.be.instanceOf(Error);
      expect(ssh2.utils.parseKey(kp.public), 'the public half too').not.to.be.instanceOf(Error);
    }
  });
});
