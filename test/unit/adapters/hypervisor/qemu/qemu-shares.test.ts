import { expect } from 'chai';
import { EventEmitter } from 'node:events';
import type { Live, LiveVms } from '../../../../../src/adapters/hypervisor/qemu/live-vms.js';
import { QemuShares } from '../../../../../src/adapters/hypervisor/qemu/qemu-shares.js';
import type { QmpClient } from '../../../../../src/adapters/hypervisor/qemu/qmp-client.js';
import type { VmCommand } from '../../../../../src/adapters/hypervisor/qemu/vm-command.js';
import type { VmSpec } from '../../../../../src/ports/hypervisor.js';

/** A monitor whose guest ejects every unplugged share at once; it records what it was sent, and when. */
class EjectingQmp extends EventEmitter {
  readonly log: string[] = [];
  async execute(cmd: string, args: { id: string }): Promise<void> {
    this.log.push(`${cmd} ${args.id}`);
    if (cmd === 'device_del')
      setImmediate(() => this.emit('event', { event: 'DEVICE_DELETED', data: { device: args.id } }));
  }
}

const vm = { name: 'v', dir: '/nonexistent/v' };
const mounts = [{ host: '/srv/a', guest: '/mnt/a' }];

function setUp(o: { driver: '9p' | 'virtiofs'; mounts: typeof mounts }) {
  const qmp = new EjectingQmp();
  const live = { qmp: qmp as unknown as QmpClient, spec: { mounts: o.mounts } as VmSpec } as Live;
  const shares = new QemuShares({
    command: { sharesAfterLoad: o.driver === '9p' } as VmCommand,
    live: {} as LiveVms,
    mountDriver: o.driver,
  });
  const refusal = (m: string) => new Error(`refused: ${m}`);
  /** A save that notes itself in the monitor's log, then answers or throws. */
  const save = (fail?: Error) => async () => {
    qmp.log.push('save');
    if (fail) throw fail;
    return 'saved';
  };
  return { qmp, live, shares, refusal, save };
}

describe('adapters/hypervisor/qemu/qemu-shares: a save of a guest with host folders', () => {
  it('refuses a guest that did not let go of its folders, or whose folders are virtio-fs, before anything is touched', async () => {
    for (const [driver, released] of [
      ['9p', false],
      ['virtiofs', true],
    ] as const) {
      const { qmp, live, shares, refusal, save } = setUp({ driver, mounts });
      const err = await shares
        .saveWithout(live, vm, { sharesReleased: released }, { back: true, refusal }, save())
        .catch((e: Error) => e);
      expect((err as Error).message, driver).to.equal('refused: vm v shares host folders it did not let go of');
      expect(qmp.log, driver).to.deep.equal([]);
    }
  });

  it('unplugs the shares, saves, and plugs them back when the guest runs on (a capture)', async () => {
    const { qmp, live, shares, refusal, save } = setUp({ driver: '9p', mounts });
    const got = await shares.saveWithout(live, vm, { sharesReleased: true }, { back: true, refusal }, save());
    expect(got).to.equal('saved');
    expect(qmp.log).to.deep.equal(['device_del share0', 'save', 'device_add share0']);
  });

  it('plugs them back when the save fails, and passes its error on', async () => {
    const { qmp, live, shares, refusal, save } = setUp({ driver: '9p', mounts });
    const err = await shares
      .saveWithout(live, vm, { sharesReleased: true }, { back: true, refusal }, save(new Error('migration failed')))
      .catch((e: Error) => e);
    expect((err as Error).message).to.equal('migration failed');
    expect(qmp.log).to.deep.equal(['device_del share0', 'save', 'device_add share0']);
  });

  it('leaves them out after a save whose QEMU quits (a suspend), and saves a guest without folders as it is', async () => {
    const suspended = setUp({ driver: '9p', mounts });
    await suspended.shares.saveWithout(
      suspended.live,
      vm,
      { sharesReleased: true },
      { back: false, refusal: suspended.refusal },
      suspended.save(),
    );
    expect(suspended.qmp.log).to.deep.equal(['device_del share0', 'save']);
    const bare = setUp({ driver: 'virtiofs', mounts: [] });
    await bare.shares.saveWithout(bare.live, vm, {}, { back: true, refusal: bare.refusal }, bare.save());
    expect(bare.qmp.log).to.deep.equal(['save']);
  });
});
