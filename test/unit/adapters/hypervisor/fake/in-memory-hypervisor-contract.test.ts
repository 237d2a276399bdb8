import { InMemoryHypervisor } from '../../../../../src/adapters/hypervisor/fake/in-memory-hypervisor.js';
import { hypervisorContract } from '../../../../contract/hypervisor-contract.js';

hypervisorContract('InMemoryHypervisor', async () => {
  const hv = new InMemoryHypervisor({ bootDelayMs: 5 });
  const wait = async (name: string, ms: number) => {
    const end = Date.now() + ms;
    while (!hv.guestUp(name)) {
      if (Date.now() > end) throw new Error(`${name} not up`);
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  return {
    hv,
    image: 'minimal',
    bootMs: 1000,
    waitUp: (name, _h, ms) => wait(name, ms),
    answers: async (name) => hv.guestUp(name),
    crash: (name) => hv.crash(name),
    live: () => hv.live(),
    restart: async () => hv,
  };
});
