import { expect } from 'chai';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { HttpGuestAgent } from '../../src/adapters/guest-link/http-guest-agent.js';
import { ImageCatalog } from '../../src/adapters/images/image-catalog.js';
import { alive, layout } from '../../src/adapters/hypervisor/qemu/qemu-files.js';
import { QemuHypervisor } from '../../src/adapters/hypervisor/qemu/qemu-hypervisor.js';
import { QmpClient } from '../../src/adapters/hypervisor/qemu/qmp-client.js';
import type { VmHandle, VmSpec } from '../../src/ports/hypervisor.js';
import { tempDir } from '../helpers/daemon.js';
import { SilentLogger } from '../fakes/fakes.js';
import { ensureImage } from './image.js';
import { poll, waitUntil } from '../helpers/wait.js';

/**
 * Daemons before the migration-stream suspend saved an internal qcow2 snapshot (`savevm
 * svc-suspend`) and a marker of one line, `svc-suspend`. Such VMs must still restore, and clone.
 */
describe('QEMU: a VM suspended by an older daemon (internal snapshot)', function () {
  this.timeout(300_000);
  const agent = new HttpGuestAgent();
  const make = () =>
    new QemuHypervisor({
      qemuBinary: 'qemu-system-x86_64',
      accel: 'auto',
      images: new ImageCatalog(ensureImage()),
      log: new SilentLogger(),
      vsock: false,
      mountDriver: '9p',
      qemuUser: 'nobody',
    });
  let hv = make();
  const dir = tempDir('svc-legacy-');
  const spec = (name: string): VmSpec => {
    mkdirSync(join(dir, name), { recursive: true });
    return {
      name,
      dir: join(dir, name),
      cpus: 1,
      memory_mb: 384,
      disk_gb: 2,
      image: 'minimal',
      hostname: name,
      forwards: [],
      mounts: [],
    };
  };
  const sh = async (h: VmHandle, script: string) =>
    (await agent.exec({ host: '127.0.0.1', port: h.agent_port }, { cmd: 'sh', args: ['-c', script] })).stdout.trim();
  const waitUp = (h: VmHandle, ms: number) =>
    waitUntil(
      'the guest answers',
      async () => (await agent.health({ host: '127.0.0.1', port: h.agent_port }, 1000), true),
      { ms, every: 200 },
    );
  const gone = async (pid: number) => {
    await poll(() => !alive(pid), { ms: 10_000 });
    expect(alive(pid)).to.equal(false);
  };

  after(async () => {
    for (const name of Object.keys(hv.pids())) await hv.destroy({ name, dir: join(dir, name) });
    await hv.release();
    agent.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('restores it with -loadvm, clones it by copying the disk with its snapshot, and suspends it again as a RAM image', async () => {
    const old = spec('old');
    await hv.provision(old);
    const h = await hv.launch(old);
    await waitUp(h, 120_000);
    await sh(h, 'echo legacy > /root/l.txt; sync');
    // Suspend the way older daemons did (QEMU takes one monitor client: the adapter lets go first).
    await hv.release();
    hv = make();
    const qmp = await QmpClient.connect(layout(old.dir).qmp, 3000);
    await qmp.execute('stop');
    expect(await qmp.hmp('savevm svc-suspend')).to.equal('');
    writeFileSync(join(old.dir, 'suspend.marker'), 'svc-suspend\n2026-01-01T00:00:00.000Z\n');
    await qmp.execute('quit').catch(() => undefined);
    qmp.close();
    await gone(h.pid!);

    // A clone of it is a copy (the snapshot lives inside the disk): no shared layers.
    const young = spec('young');
    expect(await hv.clone(old, young)).to.deep.equal({ snapshot: true });
    expect(readdirSync(young.dir).filter((n) => n.startsWith('base-'))).to.deep.equal([]);
    const t0 = Date.now();
    const yh = await hv.launch(young, { restore: true });
    expect(yh.restored_from_snapshot).to.equal(true);
    await waitUp(yh, 30_000);
    expect(await sh(yh, 'cat /root/l.txt')).to.equal('legacy');
    // Restored, not cold-booted: its uptime goes on from the old VM's.
    expect(Number((await sh(yh, 'cat /proc/uptime')).split(' ')[0]) * 1000).to.be.above(Date.now() - t0);
    await hv.destroy(young);

    // The VM itself restores from its internal snapshot; its next suspend is a RAM image (made from a stream).
    const r = await hv.launch(old, { restore: true });
    expect(r.restored_from_snapshot).to.equal(true);
    expect(existsSync(join(old.dir, 'suspend.marker'))).to.equal(false);
    await waitUp(r, 30_000);
    expect(await sh(r, 'cat /root/l.txt')).to.equal('legacy');
    expect(await hv.suspend(old)).to.deep.equal({ snapshot: true });
    expect(readFileSync(join(old.dir, 'suspend.marker'), 'utf8')).to.match(/^image state\n/);
    expect(existsSync(join(old.dir, 'state.mig'))).to.equal(false);
    const again = await hv.launch(old, { restore: true });
    expect(again.restored_from_snapshot).to.equal(true);
    await waitUp(again, 30_000);
    expect(await sh(again, 'cat /root/l.txt')).to.equal('legacy');
    await hv.destroy(old);
  });
});
