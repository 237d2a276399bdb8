import { expect } from 'chai';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { socketAnswers } from '../../../../src/adapters/fs-kit/socket-file.js';

describe('socketAnswers: a live socket told from a stale file', () => {
  let dir: string;
  beforeEach(async () => (dir = await mkdtemp(join(tmpdir(), 'svc-sock-'))));
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it('says yes while a server listens, and no once it has gone and left its file', async () => {
    const path = join(dir, 's.sock');
    const server = createServer((c) => c.destroy());
    await new Promise<void>((r) => server.listen(path, r));
    expect(await socketAnswers(path)).to.equal(true);
    await new Promise<void>((r) => server.close(() => r()));
    await writeFile(path, ''); // what a crash leaves: a file nobody listens on
    expect(await socketAnswers(path)).to.equal(false);
  });

  it('says no for a path with nothing there', async () => {
    expect(await socketAnswers(join(dir, 'none.sock'))).to.equal(false);
  });
});
