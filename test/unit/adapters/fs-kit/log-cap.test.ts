import { expect } from 'chai';
import { closeSync, openSync, readdirSync, readFileSync, utimesSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { capDir, capLog } from '../../../../src/adapters/fs-kit/log-cap.js';
import { tempDir } from '../../../helpers/daemon.js';

describe('adapters/fs-kit/log-cap', () => {
  it('caps a log its writer keeps appending to: one older copy, the writer carries on at the start', async () => {
    const path = join(tempDir(), 'serial.log');
    const fd = openSync(path, 'a'); // as QEMU's chardev append=on and its stderr are opened
    writeSync(fd, 'x'.repeat(1000));
    expect(await capLog(path, 2000)).to.equal(false);
    writeSync(fd, 'y'.repeat(1500));
    expect(await capLog(path, 2000)).to.equal(true);
    writeSync(fd, 'after');
    closeSync(fd);
    expect(readFileSync(path, 'utf8')).to.equal('after');
    expect(readFileSync(`${path}.1`, 'utf8')).to.equal('x'.repeat(1000) + 'y'.repeat(1500));
    expect(await capLog(join(tempDir(), 'missing.log'), 1)).to.equal(false);
  });

  it('prunes a folder oldest first until it fits', async () => {
    const dir = tempDir();
    for (const [i, name] of ['old', 'mid', 'new'].entries()) {
      writeFileSync(join(dir, name), Buffer.alloc(100));
      utimesSync(join(dir, name), 1000 + i, 1000 + i);
    }
    expect(await capDir(dir, 250)).to.deep.equal(['old']);
    expect(readdirSync(dir).sort()).to.deep.equal(['mid', 'new']);
    expect(await capDir(dir, 1000)).to.deep.equal([]);
  });
});
