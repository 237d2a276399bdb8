import { expect } from 'chai';
import { EventEmitter } from 'node:events';
import type { QmpClient } from '../../../../../src/adapters/hypervisor/qemu/qmp-client.js';
import { plugShares, replugShares, unplugShares } from '../../../../../src/adapters/hypervisor/qemu/share-plug.js';

/** A monitor that records commands and answers `device_del` with `answer` (an event later, or a refusal). */
class FakeQmp extends EventEmitter {
  readonly sent: [string, unknown][] = [];
  constructor(private readonly answer: (cmd: string, args: Record<string, string>) => Promise<unknown>) {
    super();
  }
  execute(cmd: string, args: Record<string, string>): Promise<unknown> {
    this.sent.push([cmd, args]);
    return this.answer(cmd, args);
  }
  deleted(id: string): void {
    this.emit('event', { event: 'DEVICE_DELETED', data: { device: id, path: `/machine/peripheral/${id}` } });
  }
}
const qmpOf = (q: FakeQmp) => q as unknown as QmpClient;

describe('adapters/hypervisor/qemu/share-plug', () => {
  it('unplugs each share by id and resolves once the guest gave every one back', async () => {
    const q = new FakeQmp(async (_cmd, args) => void setTimeout(() => q.deleted(args.id), 5));
    await unplugShares(qmpOf(q), 2);
    expect(q.sent).to.deep.equal([
      ['device_del', { id: 'share0' }],
      ['device_del', { id: 'share1' }],
    ]);
    expect(q.listenerCount('event')).to.equal(0);
  });

  it('gives the save up, naming the shares not given back, when the guest does not eject them in time', async () => {
    const q = new FakeQmp(async (_cmd, args) => void (args.id === 'share0' && q.deleted('share0')));
    const err = await unplugShares(qmpOf(q), 2, 50).catch((e: Error) => e);
    expect((err as Error).message).to.equal('the guest did not give back its shares (share1) within 50 ms');
    expect(q.listenerCount('event')).to.equal(0);
    expect(q.listenerCount('close')).to.equal(0);
  });

  it("ends with QEMU's refusal or its going away, and no rejection is left unheard when the end comes first", async () => {
    const refused = new FakeQmp(async () => {
      throw new Error("Device 'share0' not found");
    });
    expect(((await unplugShares(qmpOf(refused), 1).catch((e: Error) => e)) as Error).message).to.equal(
      "Device 'share0' not found",
    );
    // The timeout passes while a device_del is still unanswered: the error is the timeout's, once,
    // and no rejection goes unheard meanwhile (one would end the daemon: Node's default).
    const unheard: unknown[] = [];
    const note = (reason: unknown) => void unheard.push(reason);
    process.on('unhandledRejection', note);
    try {
      const slow = new FakeQmp(() => new Promise((r) => setTimeout(r, 80)));
      const err = await unplugShares(qmpOf(slow), 1, 20).catch((e: Error) => e);
      expect((err as Error).message).to.match(/did not give back its shares \(share0\) within 20 ms/);
    } finally {
      process.off('unhandledRejection', note);
    }
    expect(unheard).to.deep.equal([]);
    const gone = new FakeQmp(async () => void setTimeout(() => gone.emit('close'), 5));
    expect(((await unplugShares(qmpOf(gone), 1).catch((e: Error) => e)) as Error).message).to.equal(
      'qemu went away while its shares were unplugged',
    );
  });

  it('plugs shares in by id, fsdev, tag and slot; plugging back leaves one still there as it is', async () => {
    const mounts = [
      { host: '/a', guest: '/a', tag: 'a' },
      { host: '/b', guest: '/b' },
    ];
    const q = new FakeQmp(async () => undefined);
    await plugShares(qmpOf(q), mounts);
    expect(q.sent).to.deep.equal([
      ['device_add', { driver: 'virtio-9p-pci', id: 'share0', fsdev: 'fs0', mount_tag: 'a', addr: '0x10' }],
      ['device_add', { driver: 'virtio-9p-pci', id: 'share1', fsdev: 'fs1', mount_tag: 'mount1', addr: '0x11' }],
    ]);
    const dup = new FakeQmp(async (_cmd, args) => {
      if (args.id === 'share0') throw new Error("Duplicate device ID 'share0'");
    });
    await replugShares(qmpOf(dup), mounts);
    expect(dup.sent.map(([, a]) => (a as { id: string }).id)).to.deep.equal(['share0', 'share1']);
    const strict = await plugShares(qmpOf(dup), mounts).catch((e: Error) => e);
    expect((strict as Error).message).to.equal("Duplicate device ID 'share0'");
  });
});
