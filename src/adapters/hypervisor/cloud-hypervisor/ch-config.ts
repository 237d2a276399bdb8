import type { Config, ConfigSection } from '../../../app/config.js';

/** The `cloud_hypervisor:` section of the config (docs/cloud-hypervisor.md). */
export interface ChSection {
  binary: string;
}

export const CH_SECTION: ConfigSection = {
  name: 'cloud_hypervisor',
  driver: 'cloud-hypervisor',
  keys: { binary: ['string', 'cloud-hypervisor'] },
};

export const chSection = (config: Config) => config.sections.cloud_hypervisor as unknown as ChSection;
