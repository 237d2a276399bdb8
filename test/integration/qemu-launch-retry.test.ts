import { expect } from 'chai';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { QemuHypervisor } from '../../src/adapters/hypervisor/qemu/qemu-hypervisor.js';
import type { Forward, PortForward } from '../../src/domain/vm.js';
import type { NetdGuestNetwork } from '../../src/adapters/guest-net/netd-guest-network.js';
import { tempDir } from '../helpers/daemon.js';
import { DIES_AT_CONT, installFakeQemu, qemuOn, type FakeQemu } from '../helpers/fake-qemu.js';

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

  it('lets a loaded guest run only once QEMU has taken its network; a QEMU that dies then restores again from the state kept', async () => {
    // svc-netd's part, standing in: connects to the NIC's socket as netd does.
    const links = new Map<string, Socket>();
    const netd = {
      async attach(vm: { name: string }, socket: string, forwards: PortForward[]): Promise<Forward[]> {
        const c = connect(socket);
        await once(c, 'connect');
        links.set(vm.name, c);
        return forwards.map((f, i) => ({ ...f, host_port: f.host_port || 41000 + i, kind: 'live' as const }));
      },
      async detach(name: string) {
        links.get(name)?.destroy();
        links.delete(name);
      },
      async close() {
        for (const c of links.values()) c.destroy();
      },
    };
    await hv.release();
    hv = qemuOn(q, { network: netd as unknown as NetdGuestNetwork });
    const spec = await q.suspendedVm('k');
    q.failing({ 1: DIES_AT_CONT, 2: DIES_AT_CONT });
    const h = await hv.launch(spec, { restore: true });
    expect(q.calls().map((a) => opt(a, '-incoming'))).to.deep.equal(['fd:3', 'fd:3', 'fd:3']);
    expect(h.restored_from_snapshot).to.equal(true);
    expect(h.cold_boot_reason).to.equal(undefined);
    // Each start loads the state and waits: its guest runs by the daemon's `cont`, once the network is attached.
    for (const start of [1, 2, 3]) {
      const steps = q
        .qmp()
        .filter(([n, c]) => n === start && ['query-migrate', 'cont', '(network attached)'].includes(c))
        .map(([, c]) => c);
      expect(
        steps.filter((c) => c !== 'query-migrate'),
        `start ${start}`,
      ).to.deep.equal(['(network attached)', 'cont']);
    }
    expect(existsSync(join(spec.dir, 'state.mig')), 'the state goes once a guest runs from it').to.equal(false);
    await hv.kill(spec);
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
