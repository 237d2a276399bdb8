import { InMemoryHypervisor } from '../../../../../src/adapters/hypervisor/fake/in-memory-hypervisor.js';
import { hypervisorContract } from '../../../../contract/hypervisor-contract.js';
import { waitUntil } from '../../../../helpers/wait.js';

hypervisorContract('InMemoryHypervisor', async () => {
  const hv = new InMemoryHypervisor({ bootDelayMs: 5 });
  const wait = (name: string, ms: number) => waitUntil(`${name} up`, () => hv.guestUp(name), { ms, every: 5 });
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
