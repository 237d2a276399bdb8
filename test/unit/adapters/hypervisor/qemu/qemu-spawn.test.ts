import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnQemu } from '../../../../../src/adapters/hypervisor/qemu/qemu-spawn.js';

describe('adapters/hypervisor/qemu/qemu-spawn: a QEMU that cannot be started', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'svc-qemu-spawn-'));
    writeFileSync(join(dir, 'disk.img'), '');
    // what an earlier start of this VM left in its log is not this start's failure
    writeFileSync(join(dir, 'qemu.log'), 'qemu-system-x86_64: an old failure\n');
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  for (const [what, binary, code] of [
    ['a binary that is not there', '/nonexistent/svc-test-qemu', 'ENOENT'],
    ['a file that is not executable', '', 'EACCES'],
  ] as const)
    it(`answers an Error for ${what}, at once (an unheard spawn error stops the daemon)`, async () => {
      const bin = binary || join(dir, 'disk.img');
      const t0 = Date.now();
      const r = await spawnQemu({
        binary: bin,
        args: [],
        dir,
        disk: join(dir, 'disk.img'),
        qmp: join(dir, 'qmp.sock'),
      });
      expect(r).to.be.instanceOf(Error);
      expect((r as Error).message).to.match(new RegExp(`qemu could not be started: .*${code}`));
      expect(Date.now() - t0, 'not the monitor wait of 15 s').to.be.below(5000);
    });
});
