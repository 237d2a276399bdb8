import { expect } from 'chai';
import type { ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { LiveVms } from '../../../../../src/adapters/hypervisor/qemu/live-vms.js';
import type { QmpClient } from '../../../../../src/adapters/hypervisor/qemu/qmp-client.js';

/** A QEMU child process and its monitor, both ended by hand. */
function qemu() {
  const child = new EventEmitter();
  const qmp = Object.assign(new EventEmitter(), { close: () => undefined });
  return {
    child: child as unknown as ChildProcess,
    qmp: qmp as unknown as QmpClient,
    exit: () => child.emit('exit', 0, null),
  };
}

describe('the QEMU processes a daemon drives (LiveVms)', () => {
  it("tells every listener of a process's end, and of a crash only when nobody asked for it", async () => {
    const live = new LiveVms();
    const gone: string[] = [];
    const crashed: string[] = [];
    live.onGone((n) => gone.push(n));
    live.onExit((n, why) => crashed.push(`${n}: ${why}`));
    const a = qemu();
    const b = qemu();
    const va = live.track('a', { pid: 1, qmp: a.qmp, child: a.child, expected: false, cid: 3, dir: '/x/a' });
    const vb = live.track('b', { pid: 2, qmp: b.qmp, child: b.child, expected: false, cid: 4, dir: '/x/b' });
    vb.expected = true;
    a.exit();
    b.exit();
    await Promise.all([va.gone, vb.gone]);
    expect(gone).to.deep.equal(['a', 'b']);
    expect(crashed).to.deep.equal(['a: exited with status 0']);
    expect(live.all()).to.deep.equal([]);
  });

  it('once released, passes on no end of a process it held (a new daemon may run a VM of that name)', async () => {
    const live = new LiveVms();
    const gone: string[] = [];
    const crashed: string[] = [];
    live.onGone((n) => gone.push(n));
    live.onExit((n) => crashed.push(n));
    const q = qemu();
    const v = live.track('main', { pid: 1, qmp: q.qmp, child: q.child, expected: false, cid: 3, dir: '/x/main' });
    live.release();
    q.exit();
    await v.gone;
    expect(gone).to.deep.equal([]);
    expect(crashed).to.deep.equal([]);
  });
});
