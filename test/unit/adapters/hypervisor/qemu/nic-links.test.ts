import { expect } from 'chai';
import { EventEmitter } from 'node:events';
import { streamAccepted } from '../../../../../src/adapters/hypervisor/qemu/nic-links.js';

describe('adapters/hypervisor/qemu NIC links', () => {
  describe('streamAccepted', () => {
    it("is true once QEMU says it took the NIC's connection, and stops listening", async () => {
      const qmp = new EventEmitter();
      const accepted = streamAccepted(qmp);
      qmp.emit('event', { event: 'RESUME' });
      qmp.emit('event', { event: 'NETDEV_STREAM_CONNECTED', data: { 'netdev-id': 'net0' } });
      expect(await accepted).to.equal(true);
      expect([qmp.listenerCount('event'), qmp.listenerCount('close')]).to.deep.equal([0, 0]);
    });

    it('is false when the monitor closes first, or when nothing is said in time', async () => {
      const gone = new EventEmitter();
      const closed = streamAccepted(gone);
      gone.emit('close');
      expect(await closed).to.equal(false);
      const silent = new EventEmitter();
      const t0 = Date.now();
      expect(await streamAccepted(silent, 30)).to.equal(false);
      expect(Date.now() - t0).to.be.within(25, 1000);
      expect(silent.listenerCount('event')).to.equal(0);
    });
  });
});
