import { expect } from 'chai';
import { existsSync } from 'node:fs';
import { AGENT_DIR, BUILD_SCRIPT } from '../../../../src/adapters/images/image-catalog.js';

describe('adapters/images/image-catalog', () => {
  // The catalog builds built-in images on first use with these; a moved file once pointed them
  // one folder above the repository, and only a real image build noticed.
  it('finds the image build script and the agent artifact in this repository', () => {
    expect(existsSync(BUILD_SCRIPT), BUILD_SCRIPT).to.equal(true);
    expect(AGENT_DIR).to.match(/\/dist\/agent$/);
    expect(existsSync(AGENT_DIR.replace(/\/dist\/agent$/, '/package.json')), AGENT_DIR).to.equal(true);
  });
});
