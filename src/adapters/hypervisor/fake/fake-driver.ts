import { ContainerModule } from 'inversify';
import { GuestAgent } from '../../../ports/guest-agent.js';
import { GuestNetwork } from '../../../ports/guest-network.js';
import { HostLinks, Hypervisor, VmDisks } from '../../../ports/hypervisor.js';
import { GuestImages } from '../../../ports/guest-images.js';
import { SshProbe } from '../../../ports/tunnels.js';
import { agentOptions, HttpGuestAgent } from '../../guest-link/http-guest-agent.js';
import { tcpConnector } from '../../guest-link/transport.js';
import { InMemoryGuestNetwork } from '../../guest-net/in-memory-guest-network.js';
import { TcpSshProbe } from '../../ssh/tcp-ssh-probe.js';
import { standInsOf, type HypervisorDriver } from '../driver.js';
import { FAKE_SECTION, fakeSection } from './fake-config.js';
import { InMemoryHypervisor } from './in-memory-hypervisor.js';
import { startLocalGuest } from './local-guest.js';

/**
 * `hypervisor: fake`: in-memory VMs with stand-in guests; with `fake.agent`, each runs a real local
 * svc-agent and SSH server, reached over TCP. No guest networks (policies are only remembered).
 */
export const fakeDriver: HypervisorDriver = {
  name: 'fake',
  section: FAKE_SECTION,
  module: (config) =>
    new ContainerModule(({ bind }) => {
      const f = fakeSection(config);
      bind(InMemoryHypervisor).toConstantValue(
        new InMemoryHypervisor({ bootDelayMs: f.boot_delay, sidecar: f.agent ? startLocalGuest : undefined }),
      );
      for (const port of [Hypervisor, VmDisks, GuestImages, HostLinks]) bind(port).toService(InMemoryHypervisor);
      bind(GuestNetwork).toConstantValue(new InMemoryGuestNetwork());
      bind(GuestAgent)
        .toDynamicValue(
          (ctx) =>
            standInsOf(ctx.get(InMemoryHypervisor))?.guestAgent ??
            new HttpGuestAgent(tcpConnector, agentOptions(config)),
        )
        .inSingletonScope();
      bind(SshProbe)
        .toDynamicValue((ctx) => standInsOf(ctx.get(InMemoryHypervisor))?.sshProbe ?? new TcpSshProbe())
        .inSingletonScope();
    }),
};
