import { expect } from 'chai';
import { world } from '../../fakes/world.js';
import { GuestAgent } from '../../../src/ports/guest-agent.js';
import type { GuestIdentity } from '../../../src/domain/agent.js';
import { CLOCK_RESEND_MS } from '../../../src/app/guest-readiness.js';

describe('app/GuestReadiness: the clock of a restored guest', () => {
  /** A suspended VM `w` whose restore's identity calls are recorded; the first takes `slowMs`. */
  async function restoreWith(slowMs: number): Promise<{ id: GuestIdentity; at: number }[]> {
    const w = world();
    await (
      await w.creates.create({ name: 'w', persistent: true }, {})
    ).done;
    await w.svc.suspend('w');
    const agent = w.container.get<GuestAgent>(GuestAgent);
    const calls: { id: GuestIdentity; at: number }[] = [];
    agent.setIdentity = async (_ep, id) => {
      calls.push({ id, at: Date.now() });
      if (calls.length === 1) await new Promise((r) => setTimeout(r, slowMs));
    };
    await w.svc.restore('w');
    return calls;
  }

  it('sets the clock once more, alone, when the identity call was slow (the time it carried is that late)', async () => {
    const calls = await restoreWith(CLOCK_RESEND_MS + 200);
    expect(calls).to.have.length(2);
    expect(calls[1].id).to.deep.equal({ hostname: 'w', time_ms: calls[1].id.time_ms });
    expect(calls[1].id.time_ms - calls[0].id.time_ms).to.be.at.least(CLOCK_RESEND_MS + 150);
    expect(Math.abs(calls[1].id.time_ms - calls[1].at)).to.be.below(100);
  });

  it('sets it once when the call was quick', async () => {
    const calls = await restoreWith(0);
    expect(calls).to.have.length(1);
    expect(calls[0].id).to.include({ hostname: 'w' });
  });
});
