import { ConfigError, type Config, type ConfigSection } from '../../../app/config.js';

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
