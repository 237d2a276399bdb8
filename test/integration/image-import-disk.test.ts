import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { importDisk } from '../../src/adapters/images/image-import.js';
import { InvalidArgumentError } from '../../src/domain/errors.js';
import { tempDir } from '../helpers/daemon.js';

// Real qemu-img on real files (scripts/ensure-host-deps.sh installs it before these run).
const img = (...args: string[]) => execFileSync('qemu-img', args, { encoding: 'utf8' });

describe('importing a cloud disk: what its header claims is bounded', function () {
  this.timeout(30_000);

  it('refuses a qcow2 that claims more than the largest disk a VM may have (a petabyte in a few hundred bytes), leaving nothing', async () => {
    const dir = tempDir('import-size');
    const huge = join(dir, 'huge.qcow2');
    img('create', '-q', '-f', 'qcow2', huge, '1P');
    const out = join(dir, 'out');
    const err = await importDisk(huge, out, { id: 'huge' }, () => undefined).catch((e: Error) => e);
    expect(err).to.be.instanceOf(InvalidArgumentError);
    expect((err as Error).message).to.match(/is a disk of 1048576 GB; at most 2048 GB can be imported/);
    expect(existsSync(out), 'no image folder').to.equal(false);
  });
});
