import { expect } from 'chai';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RamStaging } from '../../../../../src/adapters/hypervisor/qemu/ram-staging.js';
import { SilentLogger } from '../../../../fakes/fakes.js';

describe('where RAM images are made (RamStaging)', () => {
  let root: string;
  beforeEach(() => (root = mkdtempSync(join(tmpdir(), 'svc-staging-'))));
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('makes them in place when its root does not exist', async () => {
    const s = new RamStaging({ root: join(root, 'missing'), tag: 't', log: new SilentLogger() });
    expect(await s.dirFor(1 << 20)).to.equal(undefined);
  });

  it("sweeps what a crashed daemon of its data dir left when it starts, before any image, and nothing of another's", async () => {
    mkdirSync(join(root, 'svc-ram-t-left'));
    writeFileSync(join(root, 'svc-ram-t-left', 'a.ram.tmp'), 'memory');
    mkdirSync(join(root, 'svc-ram-u-other'));
    const s = new RamStaging({ root, tag: 't', log: new SilentLogger() });
    for (let i = 0; i < 50 && existsSync(join(root, 'svc-ram-t-left')); i++)
      await new Promise((r) => setTimeout(r, 10));
    expect(readdirSync(root)).to.deep.equal(['svc-ram-u-other']);
    const made = await s.dirFor(1 << 20);
    expect(readdirSync(root).sort()).to.deep.equal([made!.dir.slice(root.length + 1), 'svc-ram-u-other'].sort());
    await s.close();
    expect(readdirSync(root)).to.deep.equal(['svc-ram-u-other']);
  });

  it('holds the room each image may take until it is released, so images made at once never count the same room twice', async () => {
    const s = new RamStaging({ root, tag: 't', log: new SilentLogger() });
    const fs = statfsSync(root);
    const most = fs.bavail * fs.bsize;
    const big = Math.floor(most * 0.6);
    const a = await s.dirFor(big);
    expect(a?.dir.startsWith(join(root, 'svc-ram-t-'))).to.equal(true);
    expect(await s.dirFor(big), 'the room a holds is not there for b').to.equal(undefined);
    const small = await s.dirFor(1 << 20);
    expect(small?.dir).to.equal(a!.dir);
    a!.release();
    a!.release(); // twice: given back once
    const b = await s.dirFor(big);
    expect(b?.dir).to.equal(a!.dir);
    expect(await s.dirFor(big)).to.equal(undefined);
    b!.release();
    small!.release();
    expect(await s.dirFor(most * 2), 'more than the root has').to.equal(undefined);
    await s.close();
  });
});
