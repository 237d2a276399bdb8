import { expect } from 'chai';
import { MetricsHistory } from '../../../src/ports/stores.js';
import type { MemoryMetricsHistory } from '../../fakes/fakes.js';
import { world } from '../../fakes/world.js';

describe('app/MetricsSampler', () => {
  it("closes a VM's ring before its files are removed, a sample in flight with it", async () => {
    const w = world({ sandbox_metrics_interval: '1s' });
    await (
      await w.creates.create({ name: 'm', metrics_enabled: true }, {})
    ).done;
    const history = w.container.get<MemoryMetricsHistory>(MetricsHistory);
    for (const t0 = Date.now(); !history.points.get('m')?.length;) {
      if (Date.now() - t0 > 5000) throw new Error('no sample taken');
      await new Promise((r) => setTimeout(r, 10));
    }
    const order: string[] = [];
    // A ring that takes a while to close, as a real one does when it is being opened.
    history.close = () => new Promise<void>((r) => setTimeout(r, 50)).then(() => void order.push('ring closed'));
    const remove = w.store.remove.bind(w.store);
    w.store.remove = async (name: string) => {
      order.push('files removed');
      return remove(name);
    };
    await w.svc.delete('m');
    expect(order).to.deep.equal(['ring closed', 'files removed']);
  });
});
