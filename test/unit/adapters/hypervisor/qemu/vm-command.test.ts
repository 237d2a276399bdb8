import { expect } from 'chai';
import { ImageCatalog } from '../../../../../src/adapters/images/image-catalog.js';
import { RamImages } from '../../../../../src/adapters/hypervisor/qemu/ram-image.js';
import { VmCommand } from '../../../../../src/adapters/hypervisor/qemu/vm-command.js';
import type { VmSpec } from '../../../../../src/ports/hypervisor.js';
import { SilentLogger } from '../../../../fakes/fakes.js';

const spec = (mounts: VmSpec['mounts'] = []): VmSpec => ({
  name: 'v',
  dir: '/nowhere/v',
  cpus: 1,
  memory_mb: 128,
  disk_gb: 1,
  image: 'minimal',
  hostname: 'v',
  forwards: [],
  mounts,
});
const share = [{ host: '/srv/data', guest: '/mnt/data' }];
const command = (mountDriver: '9p' | 'virtiofs') =>
  new VmCommand({
    images: new ImageCatalog('/nowhere'),
    mountDriver,
    qemuUser: 'nobody',
    accelerator: async () => 'tcg',
    guestNet: 'netd',
  });

describe('adapters/hypervisor/vm-command and ram images', () => {
  it('drops QEMU to qemu_user when the daemon is root, except for a VM whose 9p shares QEMU serves itself', () => {
    const root = process.getuid?.() === 0;
    expect(command('9p').runAs(spec())).to.equal(root ? 'nobody' : undefined);
    expect(command('9p').runAs(spec(share))).to.equal(undefined);
    expect(command('virtiofs').runAs(spec(share))).to.equal(root ? 'nobody' : undefined);
  });

  it('keeps a stream for a VM with virtio-fs shares (its RAM is a memfd virtiofsd shares), and everywhere with qemu.ram_images: false', () => {
    const images = (driver: '9p' | 'virtiofs', enabled = true) =>
      new RamImages({ binary: 'qemu', command: command(driver), log: new SilentLogger(), enabled });
    expect(images('virtiofs').fits(spec(share))).to.equal(false);
    expect(images('virtiofs').fits(spec())).to.equal(true);
    expect(images('9p').fits(spec(share))).to.equal(true);
    expect(images('9p', false).fits(spec())).to.equal(false);
  });

  it('makes no image (and starts no QEMU) for a VM that cannot use one', async () => {
    const images = new RamImages({
      binary: '/nonexistent/qemu',
      command: command('virtiofs'),
      log: new SilentLogger(),
      enabled: true,
    });
    expect(await images.make(spec(share), 'state.mig', 'state')).to.equal(undefined);
  });
});
