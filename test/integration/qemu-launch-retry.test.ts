import { expect } from 'chai';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { QemuHypervisor } from '../../src/adapters/hypervisor/qemu/qemu-hypervisor.js';
import { tempDir } from '../helpers/daemon.js';
import { installFakeQemu, qemuOn, type FakeQemu } from '../helpers/fake-qemu.js';

describe('QEMU launch: what a failed start is tried again as', function () {
  this.timeout(30_000);
  let q: FakeQemu;
  let hv: QemuHypervisor;

  beforeEach(() => {
    q = installFakeQemu(tempDir('svc-launch-retry-'));
    hv = qemuOn(q);
  });
  afterEach(() => hv.release());

  const opt = (args: string[], flag: string) => (args.includes(flag) ? args[args.indexOf(flag) + 1] : undefined);

  it('picks new ports and keeps restoring when a host port was taken before QEMU bound it', async () => {
    const spec = await q.suspendedVm('a');
    q.failing({
      1: "qemu-system-x86_64: -netdev user,id=net0,hostfwd=tcp:127.0.0.1:40000-:22: could not set up host forwarding rule 'tcp:127.0.0.1:40000-:22'",
    });
    const h = await hv.launch(spec, { restore: true });
    const [first, second] = q.calls();
    expect(q.calls()).to.have.length(2);
    expect(opt(first, '-incoming')).to.equal('fd:3');
    expect(opt(second, '-incoming'), 'the retry still restores').to.equal('fd:3');
    expect(opt(second, '-netdev')).to.not.equal(opt(first, '-netdev'));
    expect(opt(second, '-netdev')).to.include(`hostfwd=tcp:127.0.0.1:${h.agent_port}-:7475`);
    expect(h.restored_from_snapshot).to.equal(true);
    // Restored: the saved state no longer matches the disk and is gone.
    expect(existsSync(join(spec.dir, 'suspend.marker'))).to.equal(false);
    await hv.kill(spec);
  });

  it('waits for a disk lock that is going away and keeps restoring; a lock that stays fails the launch', async () => {
    const spec = await q.suspendedVm('l');
    const locked =
      'qemu-system-x86_64: -drive file=/dev/fdset/1: Failed to get "write" lock | Is another process using the image [/dev/fdset/1]?';
    q.failing({ 1: locked, 2: locked });
    const h = await hv.launch(spec, { restore: true });
    expect(q.calls().map((a) => opt(a, '-incoming'))).to.deep.equal(['fd:3', 'fd:3', 'fd:3']);
    expect(h.restored_from_snapshot).to.equal(true);
    await hv.kill(spec);

    const held = q.vm('h');
    q.failing(Object.fromEntries(Array.from({ length: 20 }, (_, i) => [i + 4, locked])));
    let err: Error | undefined;
    const t0 = Date.now();
    await hv.launch(held).catch((e: Error) => (err = e));
    expect(err?.message).to.match(/Failed to get "write" lock/);
    expect(q.calls().length - 3, 'ten waits, then it gives up').to.equal(11);
    expect(Date.now() - t0).to.be.within(1500, 10_000);
  });

  it('cold-boots the same disk when the saved state does not load, and fails after three taken ports', async () => {
    const spec = await q.suspendedVm('b');
    q.failing({ 1: 'qemu-system-x86_64: load of migration failed: Invalid argument' });
    const h = await hv.launch(spec, { restore: true });
    const [first, second] = q.calls();
    expect(opt(first, '-incoming')).to.equal('fd:3');
    expect(second, 'a cold boot').to.not.include('-incoming');
    expect(h.restored_from_snapshot).to.equal(false);
    await hv.kill(spec);

    const taken = "could not set up host forwarding rule 'tcp:127.0.0.1:1-:22'";
    const again = await q.suspendedVm('c');
    q.failing({ 3: taken, 4: taken, 5: taken, 6: taken });
    let err: Error | undefined;
    await hv.launch(again, { restore: true }).catch((e: Error) => (err = e));
    // Three tries with the saved state, then one cold boot, which fails the same way.
    expect(
      q
        .calls()
        .slice(2)
        .map((a) => opt(a, '-incoming') ?? null),
    ).to.deep.equal(['fd:3', 'fd:3', 'fd:3', null]);
    expect(err?.message).to.match(/qemu failed to start vm c: .*host forwarding/);
  });
});
