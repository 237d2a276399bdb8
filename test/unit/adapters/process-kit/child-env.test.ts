import { expect } from 'chai';
import { childEnv } from '../../../../src/adapters/process-kit/child-env.js';

describe('adapters/process-kit/childEnv', () => {
  it("passes what children need and keeps the daemon's tokens and everything else back", () => {
    const env = childEnv(
      { SVC_GUEST_ROOT: '/g' },
      {
        PATH: '/bin',
        HOME: '/root',
        https_proxy: 'http://p:3128',
        SVC_API_TOKEN: 'secret',
        AWS_SECRET_ACCESS_KEY: 'x',
        NODE_OPTIONS: '--inspect',
      },
    );
    expect(env).to.deep.equal({ PATH: '/bin', HOME: '/root', https_proxy: 'http://p:3128', SVC_GUEST_ROOT: '/g' });
    expect(childEnv({}, {}).PATH).to.match(/\/usr\/bin/);
  });
});
