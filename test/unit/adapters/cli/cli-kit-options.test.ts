import { expect } from 'chai';
import { envOption, restartOption } from '../../../../src/adapters/cli/cli-kit.js';

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

describe('svc CLI: -e/--env of svc x and svc run', () => {
  it("takes NAME=VALUE as given and NAME alone from this shell's environment, the last of a name twice", () => {
    const here = { TOKEN: 's3cret', EMPTY: '' };
    expect(envOption([], here)).to.equal(undefined);
    expect(envOption(['A=x=y', 'TOKEN', 'EMPTY', 'B=', 'A=2'], here)).to.deep.equal({
      A: '2',
      TOKEN: 's3cret',
      EMPTY: '',
      B: '',
    });
  });

  it('refuses a NAME this shell does not have, and an empty name', () => {
    expect(() => envOption(['MISSING'], {})).to.throw(
      '--env MISSING: MISSING is not set in this shell (give NAME=VALUE)',
    );
    expect(() => envOption(['=x'], {})).to.throw('--env takes NAME=VALUE or NAME, not "=x"');
  });
});
