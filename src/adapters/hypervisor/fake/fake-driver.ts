import { ContainerModule } from 'inversify';
import { ConfigError, type Config, type ConfigSection } from '../../../app/config.js';
import { GuestAgent } from '../../../ports/guest-agent.js';
import { GuestNetwork } from '../../../ports/guest-network.js';
import { GuestImages, HostLinks, Hypervisor, VmDisks } from '../../../ports/hypervisor.js';
import { SshProbe } from '../../../ports/tunnels.js';
import { agentOptions, HttpGuestAgent } from '../../guest-link/http-guest-agent.js';
import { tcpConnector } from '../../guest-link/transport.js';
import { InMemoryGuestNetwork } from '../../guest-net/in-memory-guest-network.js';
import { TcpSshProbe } from '../../ssh/tcp-ssh-probe.js';
import { standInsOf, type HypervisorDriver } from '../driver.js';
import { InMemoryHypervisor } from './in-memory-hypervisor.js';
import { startLocalGuest } from './local-guest.js';

/** The `fake:` section of the config (docs/config.md). */
export interface FakeSection {
  /** How long after a launch a fake guest answers. */
  boot_delay: number;
  /** Run a real local svc-agent and SSH server per VM (test_mode only: its commands run on this host). */
  agent: boolean;
}

export const FAKE_SECTION: ConfigSection = {
  name: 'fake',
  driver: 'fake',
  keys: { boot_delay: ['duration', '50ms'], agent: ['bool', false] },
  aliases: { fake_boot_delay: 'boot_delay', fake_agent: 'agent' },
  check(s, config) {
    if (s.agent && !(config.test_mode && config.hypervisor === 'fake')) {
      throw new ConfigError(
        'config key "fake.agent": runs every guest command on this host as the daemon\'s user, with no isolation; it is for tests only and needs hypervisor: fake and test_mode: true',
      );
    }
  },
};

export const fakeSection = (config: Config) => config.sections.fake as unknown as FakeSection;

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
