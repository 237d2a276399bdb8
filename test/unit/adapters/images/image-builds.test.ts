import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AlreadyExistsError } from '../../../../src/domain/errors.js';
import { ImageBuilds } from '../../../../src/adapters/images/image-builds.js';

describe('ImageBuilds', () => {
  let root: string;
  let builds: ImageBuilds;
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'svc-image-builds-'));
    builds = new ImageBuilds(root, (id) => join(root, id));
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('lets one maker hold an id at a time, and frees it when the maker is done or failed', async () => {
    let finish!: () => void;
    const first = builds.holding('baked', () => new Promise<string>((r) => (finish = () => r('made'))));
    expect(builds.has('baked')).to.equal(true);
    const second = await builds.holding('baked', () => Promise.resolve('twice')).catch((e: unknown) => e);
    expect(second).to.be.instanceOf(AlreadyExistsError);
    finish();
    expect(await first).to.equal('made');
    expect(builds.has('baked')).to.equal(false);
    const failed = await builds
      .holding('baked', () => Promise.reject(new Error('convert failed')))
      .catch((e: Error) => e);
    expect((failed as Error).message).to.equal('convert failed');
    expect(builds.has('baked')).to.equal(false);
  });

  it('has no estimate for an image never built here, and no build times file to trip on', () => {
    expect(builds.estimate('debian')).to.equal(undefined);
  });
});
