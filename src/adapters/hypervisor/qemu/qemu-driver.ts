import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { ContainerModule } from 'inversify';
import { CloneSpeedUps } from '../../../ports/clone-speed-ups.js';
import { Failpoints } from '../../../ports/failpoints.js';
import { GuestAgent } from '../../../ports/guest-agent.js';
import { GuestNetwork } from '../../../ports/guest-network.js';
import { HostLinks, Hypervisor, VmDisks } from '../../../ports/hypervisor.js';
import { GuestImages } from '../../../ports/guest-images.js';
import { Logger } from '../../../ports/logger.js';
import { SshProbe } from '../../../ports/tunnels.js';
import { agentOptions, HttpGuestAgent } from '../../guest-link/http-guest-agent.js';
import { pickConnector } from '../../guest-link/transport.js';
import { InMemoryGuestNetwork } from '../../guest-net/in-memory-guest-network.js';
import { NetdClient } from '../../guest-net/netd-client.js';
import { NetdGuestNetwork } from '../../guest-net/netd-guest-network.js';
import { ImageCatalog } from '../../images/image-catalog.js';
import { TcpSshProbe } from '../../ssh/tcp-ssh-probe.js';
import type { HypervisorDriver } from '../driver.js';
import { QEMU_SECTION, qemuSection } from './qemu-config.js';
import { IMAGE_BASES_FILE, ImageBases } from './image-bases.js';
import { QemuHypervisor } from './qemu-hypervisor.js';

/**
 * `hypervisor: qemu`: one detached QEMU process per VM; guests' NICs end in svc-netd (or QEMU's own
 * network, test_mode); agents over svc-netd's TCP forward, or vsock where the host has it; clones
 * sped up by spare QEMUs (CloneSpeedUps).
 */
export const qemuDriver: HypervisorDriver = {
  name: 'qemu',
  section: QEMU_SECTION,
  module: (config) =>
    new ContainerModule(({ bind }) => {
      const q = qemuSection(config);
      bind(QemuHypervisor)
        .toDynamicValue((ctx) => {
          const log = ctx.get<Logger>(Logger);
          return new QemuHypervisor({
            qemuBinary: q.binary,
            accel: q.accel,
            images: new ImageCatalog(config.images_dir),
            log,
            vsock: q.agent_transport !== 'tcp',
            mountDriver: q.mount_driver,
            overlayMcast: config.network === 'overlay' ? config.overlay_mcast : undefined,
            logMaxBytes: config.log_max_mb * 1024 * 1024,
            qemuUser: q.user,
            failpoints: ctx.get<Failpoints>(Failpoints),
            spares: q.clone_spares,
            sparesWarm: q.clone_spares_warm,
            ramImages: q.ram_images,
            ramStaging: q.ram_image_staging
              ? {
                  root: q.ram_image_staging,
                  tag: createHash('sha256').update(config.data_dir).digest('hex').slice(0, 12),
                }
              : undefined,
            maxDiskLayers: q.max_disk_layers,
            maxVmCpus: q.max_vm_cpus,
            imageBases: new ImageBases(join(config.data_dir, IMAGE_BASES_FILE)),
            network:
              q.net === 'netd'
                ? new NetdGuestNetwork(
                    new NetdClient({
                      dataDir: config.data_dir,
                      log: log.child({ part: 'netd' }),
                      dns: config.guest_dns,
                      upstreamCa: config.egress_upstream_ca || undefined,
                    }),
                  )
                : undefined,
          });
        })
        .inSingletonScope();
      for (const port of [Hypervisor, VmDisks, GuestImages, HostLinks, CloneSpeedUps])
        bind(port).toService(QemuHypervisor);
      bind(GuestNetwork)
        .toDynamicValue((ctx) => ctx.get(QemuHypervisor).guestNetwork() ?? new InMemoryGuestNetwork())
        .inSingletonScope();
      bind(GuestAgent)
        .toDynamicValue(() => new HttpGuestAgent(pickConnector(q.agent_transport), agentOptions(config)))
        .inSingletonScope();
      bind(SshProbe)
        .toDynamicValue(() => new TcpSshProbe())
        .inSingletonScope();
    }),
};
