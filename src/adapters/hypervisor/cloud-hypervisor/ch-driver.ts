import { ContainerModule } from 'inversify';
import { GuestAgent } from '../../../ports/guest-agent.js';
import { GuestNetwork } from '../../../ports/guest-network.js';
import { HostLinks, Hypervisor, VmDisks } from '../../../ports/hypervisor.js';
import { GuestImages } from '../../../ports/guest-images.js';
import { Logger } from '../../../ports/logger.js';
import { SshProbe } from '../../../ports/tunnels.js';
import { agentOptions, HttpGuestAgent } from '../../guest-link/http-guest-agent.js';
import { hybridVsockConnector } from '../../guest-link/transport.js';
import { InMemoryGuestNetwork } from '../../guest-net/in-memory-guest-network.js';
import { ImageCatalog } from '../../images/image-catalog.js';
import type { HypervisorDriver } from '../driver.js';
import { CH_SECTION, chSection } from './ch-config.js';
import { ChHypervisor } from './ch-hypervisor.js';

/**
 * `hypervisor: cloud-hypervisor`: one `cloud-hypervisor` process per VM, its agent over hybrid
 * vsock. Its guests have no network device (no SSH: `wait=ssh` never succeeds; their egress policy
 * is only recorded). docs/cloud-hypervisor.md.
 */
export const chDriver: HypervisorDriver = {
  name: 'cloud-hypervisor',
  section: CH_SECTION,
  module: (config) =>
    new ContainerModule(({ bind }) => {
      bind(ChHypervisor)
        .toDynamicValue(
          (ctx) =>
            new ChHypervisor({
              binary: chSection(config).binary,
              images: new ImageCatalog(config.images_dir),
              log: ctx.get<Logger>(Logger),
            }),
        )
        .inSingletonScope();
      for (const port of [Hypervisor, VmDisks, GuestImages, HostLinks]) bind(port).toService(ChHypervisor);
      bind(GuestAgent).toConstantValue(new HttpGuestAgent(hybridVsockConnector, agentOptions(config)));
      bind(SshProbe).toConstantValue({ ready: async () => false });
      bind(GuestNetwork).toConstantValue(new InMemoryGuestNetwork());
    }),
};
