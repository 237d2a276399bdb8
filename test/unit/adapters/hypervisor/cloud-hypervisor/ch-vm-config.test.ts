import { expect } from 'chai';
import fc from 'fast-check';
import { chLayout, rehome, vmConfig } from '../../../../../src/adapters/hypervisor/cloud-hypervisor/ch-vm-config.js';

describe('Cloud Hypervisor VmConfig', () => {
  const l = chLayout('/data/vms/a');
  const img = {
    dir: '/data/images/debian',
    kernel: 'vmlinuz',
    initrd: 'initrd.img',
    cmdline: 'console=ttyS0 root=/dev/vda1',
  };

  it('boots the image kernel directly, with the overlay, the seed, a vsock device and no network', () => {
    const c = vmConfig({ cpus: 2, memory_mb: 1024 }, img, l);
    expect(c.cpus).to.deep.equal({ boot_vcpus: 2, max_vcpus: 2 });
    expect(c.memory).to.deep.equal({ size: 1024 * 1024 * 1024 });
    expect(c.payload).to.deep.equal({
      kernel: '/data/images/debian/vmlinuz',
      initramfs: '/data/images/debian/initrd.img',
      cmdline: img.cmdline,
    });
    expect(c.disks).to.deep.equal([
      { path: '/data/vms/a/disk.qcow2', image_type: 'Qcow2' },
      { path: '/data/vms/a/seed.iso', readonly: true, image_type: 'Raw' },
    ]);
    expect(c.vsock).to.deep.equal({ cid: 3, socket: '/data/vms/a/vsock.sock' });
    expect(c.serial).to.deep.equal({ mode: 'File', file: '/data/vms/a/serial.log' });
    expect(c).not.to.have.property('net');
  });

  it('leaves the initramfs out when the image has none', () => {
    expect(vmConfig({ cpus: 1, memory_mb: 256 }, { ...img, initrd: '' }, l).payload).to.deep.equal({
      kernel: '/data/images/debian/vmlinuz',
      cmdline: img.cmdline,
    });
  });

  it('rehome moves every path under the old folder and nothing else', () => {
    const moved = JSON.parse(
      rehome(JSON.stringify(vmConfig({ cpus: 1, memory_mb: 256 }, img, l)), '/data/vms/a', '/data/vms/b'),
    ) as { disks: { path: string }[]; vsock: { socket: string }; payload: { kernel: string } };
    expect(moved.disks.map((d) => d.path)).to.deep.equal(['/data/vms/b/disk.qcow2', '/data/vms/b/seed.iso']);
    expect(moved.vsock.socket).to.equal('/data/vms/b/vsock.sock');
    expect(moved.payload.kernel).to.equal('/data/images/debian/vmlinuz');
    // A sibling whose name starts with the old one's is not moved.
    expect(
      JSON.parse(rehome(JSON.stringify({ p: '/data/vms/ab/disk', q: '/data/vms/a' }), '/data/vms/a', '/x')),
    ).to.deep.equal({ p: '/data/vms/ab/disk', q: '/x' });
  });

  it('rehome keeps the shape of any config (property)', () => {
    const json = fc.jsonValue().filter((v) => v !== null && typeof v === 'object');
    fc.assert(
      fc.property(json, (v) => {
        const out = JSON.parse(rehome(JSON.stringify(v), '/old', '/new'));
        // Without paths under /old, nothing changes.
        expect(out).to.deep.equal(JSON.parse(JSON.stringify(v)));
      }),
    );
  });
});
