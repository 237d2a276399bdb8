import { expect } from 'chai';
import { restartOption } from '../../../../src/adapters/cli/cli-kit.js';

describe('svc CLI: svc run --restart', () => {
  it("takes docker's words for a restart policy", () => {
    expect(restartOption('always')).to.deep.equal({ restart: 'always' });
    expect(restartOption('on-failure')).to.deep.equal({ restart: 'on-failure' });
    expect(restartOption('on-failure:3')).to.deep.equal({ restart: 'on-failure', max_restarts: 3 });
    expect(restartOption('no')).to.deep.equal({});
    for (const bad of ['sometimes', 'on-failure:', 'on-failure:x', 'no:2', 'always:-1'])
      expect(() => restartOption(bad), bad).to.throw(/--restart must be/);
  });
});
