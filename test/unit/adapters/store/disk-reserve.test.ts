import { expect } from 'chai';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { DiskReserve } from '../../../../src/adapters/store/disk-reserve.js';
import { SilentLogger } from '../../../fakes/fakes.js';
import { tempDir } from '../../../helpers/daemon.js';

const full = () => Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });

describe('adapters/store/DiskReserve', () => {
  it('holds its room in real blocks, and gives it up for a write that met a full disk, which runs again', async () => {
    const path = join(tempDir('svc-reserve-'), '.reserve');
    const log = new SilentLogger();
    let t = 0;
    const r = new DiskReserve(path, 256 * 1024, log, () => t);
    await r.take();
    expect(r.holding).to.equal(true);
    expect(statSync(path).blocks * 512).to.be.at.least(256 * 1024);
    let tries = 0;
    const out = await r.write('a record', async () => {
      if (++tries === 1) throw full();
      return 'written';
    });
    expect([out, tries, r.holding, existsSync(path)]).to.deep.equal(['written', 2, false, false]);
    expect(log.lines.filter((l) => l.level === 'warn').map((l) => l.msg)).to.have.length(1);

    // nothing held: a full disk is the caller's, once; the room is asked for again after 10 s
    tries = 0;
    const err = await r
      .write('a record', async () => {
        tries++;
        throw full();
      })
      .catch((e: unknown) => e);
    expect([(err as NodeJS.ErrnoException).code, tries, existsSync(path)]).to.deep.equal(['ENOSPC', 1, false]);
    t += 10_000;
    expect(await r.write('a record', async () => 'ok')).to.equal('ok');
    expect([r.holding, existsSync(path)]).to.deep.equal([true, true]);
  });

  it('passes other failures on and keeps its room; holds nothing when told 0', async () => {
    const dir = tempDir('svc-reserve-');
    const r = new DiskReserve(join(dir, '.reserve'), 64 * 1024, new SilentLogger());
    await r.take();
    const err = await r
      .write('x', async () => {
        throw Object.assign(new Error('EACCES'), { code: 'EACCES' });
      })
      .catch((e: unknown) => e);
    expect([(err as NodeJS.ErrnoException).code, r.holding]).to.deep.equal(['EACCES', true]);
    const none = new DiskReserve(join(dir, '.none'), 0, new SilentLogger());
    await none.take();
    expect([none.holding, existsSync(join(dir, '.none'))]).to.deep.equal([false, false]);
  });
});
