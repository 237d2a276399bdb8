import { expect } from 'chai';
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { FsVmStore } from '../../../../src/adapters/store/fs-vm-store.js';
import { buildConfig } from '../../../../src/app/config.js';
import { SilentLogger } from '../../../fakes/fakes.js';
import { tempDir } from '../../../helpers/daemon.js';

describe('adapters/store/FsVmStore: what a move carries (files)', () => {
  it("lists the VM's files and its snapshots' (as paths), not its record, links, hidden folders or other folders", async () => {
    const data = tempDir('svc-vmstore-');
    const store = new FsVmStore(buildConfig({ data_dir: data }, {}), new SilentLogger());
    const dir = store.dir('box');
    const put = (path: string, text = 'x') => {
      mkdirSync(join(dir, path, '..'), { recursive: true });
      writeFileSync(join(dir, path), text);
    };
    put('instance.json', '{}');
    put('disk.qcow2', 'disk');
    put('serial.log');
    put('snapshots/a/snapshot.json', '{}');
    put('snapshots/a/layer-1.qcow2');
    put('snapshots/a/.shared-once', '');
    put('snapshots/b.json', '{}');
    put('snapshots/.c.tmp/snapshot.json', '{}'); // a snapshot not finished
    put('snapshots/a/deeper/x'); // past two folders down
    put('captures/y'); // a folder that is not the snapshots'
    symlinkSync('/etc/passwd', join(dir, 'link'));
    const files = await store.files('box');
    expect(files.map((f) => f.name)).to.deep.equal([
      'disk.qcow2',
      'serial.log',
      'snapshots/a/.shared-once',
      'snapshots/a/layer-1.qcow2',
      'snapshots/a/snapshot.json',
      'snapshots/b.json',
    ]);
    expect(files.find((f) => f.name === 'disk.qcow2')).to.deep.equal({
      name: 'disk.qcow2',
      path: join(dir, 'disk.qcow2'),
      size: 4,
    });
  });
});
