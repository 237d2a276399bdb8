import { expect } from 'chai';
import {
  socatArgs,
  startVsockRelay,
  vsockUnavailable,
  type VsockEnv,
} from '../../../../src/adapters/agent/vsock-relay.js';

function env(files: string[], cmds: Record<string, string>): VsockEnv {
  return { exists: (p) => files.includes(p), which: (c) => cmds[c] };
}

describe('adapters/agent/vsock-relay', () => {
  it('serves vsock only when the kernel has AF_VSOCK and socat exists', () => {
    expect(vsockUnavailable(env([], { socat: '/usr/bin/socat' }))).to.match(/no AF_VSOCK/);
    expect(vsockUnavailable(env(['/dev/vsock'], {}))).to.match(/socat is not installed/);
    expect(vsockUnavailable(env(['/dev/vsock'], { socat: '/usr/bin/socat' }))).to.equal(undefined);
  });

  it('relays VSOCK-LISTEN on the agent port to its loopback TCP listener', () => {
    expect(socatArgs(7475, 41234)).to.deep.equal(['-d', 'VSOCK-LISTEN:7475,reuseaddr,fork', 'TCP:127.0.0.1:41234']);
  });

  it('tries again a second later when socat cannot be started at all, and stops trying when stopped', async function () {
    this.timeout(10_000);
    // found by `which`, gone when started: an `error` event and no exit (unheard, it stops the agent)
    const fake = { ...env(['/dev/vsock'], { socat: '/nonexistent/svc-test-socat' }) };
    let asked = 0;
    const which = fake.which;
    fake.which = (c) => (asked++, which(c));
    const relay = startVsockRelay(7475, 1, fake)!;
    try {
      await new Promise((r) => setTimeout(r, 2500));
      expect(asked, 'started again after each failure').to.be.within(2, 4);
    } finally {
      relay.stop();
    }
    const now = asked;
    await new Promise((r) => setTimeout(r, 1500));
    expect(asked, 'no more tries once stopped').to.equal(now);
  });

  it('starts nothing and says why on a host without vsock', () => {
    const said: string[] = [];
    expect(startVsockRelay(7475, 1, env([], {}), (m) => said.push(m))).to.equal(undefined);
    expect(said[0]).to.match(/vsock disabled/);
  });
});
