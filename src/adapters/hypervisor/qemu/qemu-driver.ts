import { NetdClient } from '../../guest-net/netd-client.js';
import { NetdGuestNetwork } from '../../guest-net/netd-guest-network.js';
import type { HypervisorDriver } from '../driver.js';
import { ImageCatalog } from './image-catalog.js';
import { QemuHypervisor } from './qemu-hypervisor.js';

/** `hypervisor: qemu`: one detached QEMU process per VM. */
export const qemuDriver: HypervisorDriver = {
  create: (config, log, failpoints) => new QemuHypervisor({
    qemuBinary: config.qemu_binary, accel: config.accel, images: new ImageCatalog(config.images_dir),
    log, vsock: config.agent_transport !== 'tcp', mountDriver: config.mount_driver,
    overlayMcast: config.network === 'overlay' ? config.overlay_mcast : undefined, logMaxBytes: config.log_max_mb * 1024 * 1024,
    qemuUser: config.qemu_user, failpoints, spares: config.clone_spares, sparesWarm: config.clone_spares_warm,
    network: config.guest_net === 'netd' ? new NetdGuestNetwork(new NetdClient({ dataDir: config.data_dir, log: log.child({ part: 'netd' }), dns: config.guest_dns })) : undefined,
  }),
};
