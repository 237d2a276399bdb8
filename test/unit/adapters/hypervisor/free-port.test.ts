import { expect } from 'chai';
import { freePorts, portFree } from '../../../../src/adapters/hypervisor/free-port.js';

describe('freePorts', () => {
  it('gives one different port per entry, each free again once it returns', async () => {
    const ports = await freePorts(Array<'tcp'>(40).fill('tcp'));
    expect(ports).to.have.length(40);
    expect(new Set(ports).size).to.equal(40);
    for (const p of ports) expect(await portFree(p, 'tcp'), `port ${p}`).to.equal(true);
  });

  it('never gives a port the caller chose itself', async () => {
    for (let round = 0; round < 5; round++) {
      const chosen = new Set(await freePorts(Array<'tcp'>(30).fill('tcp')));
      const picked = await freePorts(Array<'tcp'>(30).fill('tcp'), chosen);
      expect(picked.filter((p) => chosen.has(p))).to.deep.equal([]);
    }
  });

  it('mixes protocols: a udp port for a udp forward', async () => {
    const [tcp, udp] = await freePorts(['tcp', 'udp']);
    expect(await portFree(tcp, 'tcp')).to.equal(true);
    expect(await portFree(udp, 'udp')).to.equal(true);
  });
});
