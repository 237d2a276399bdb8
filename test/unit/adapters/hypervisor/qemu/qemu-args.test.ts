import { expect } from 'chai';
import {
  kernelCmdline,
  qemuArgs,
  sharesToAdd,
  type QemuLaunch,
} from '../../../../../src/adapters/hypervisor/qemu/qemu-args.js';
import { addedMountScript, cloudInitMounts, mountScript } from '../../../../../src/adapters/hypervisor/guest-mounts.js';
import { shellWord } from '../../../../../src/adapters/process-kit/shell-word.js';
import { execFileSync } from 'node:child_process';
import { metaData, overlayMac } from '../../../../../src/adapters/hypervisor/guest-seed.js';
import { parseCreateRequest } from '../../../../../src/domain/create-request.js';
import { InvalidArgumentError } from '../../../../../src/domain/errors.js';

const base: QemuLaunch = {
  name: 'web',
  cpus: 2,
  memory_mb: 512,
  accel: 'tcg',
  image: {
    id: 'default',
    dir: '/img',
    kernel: 'vmlinux',
    initrd: 'initrd.img',
    disk: 'disk.qcow2',
    disk_gb: 1,
    cmdline: 'console=ttyS0',
    ssh_user: 'root',
    agent_ready: true,
    format: 1,
  },
  layout: {
    dir: '/vm',
    disk: '/vm/disk.qcow2',
    seed: '/vm/seed.iso',
    qmp: '/vm/qmp.sock',
    net: '/vm/net.sock',
    serial: '/vm/serial.log',
    pidfile: '/vm/qemu.pid',
  },
  nic: { kind: 'netd', socket: '/vm/net.sock' },
};
const userNic: QemuLaunch['nic'] = {
  kind: 'qemu-user',
  sshPort: 2222,
  agentPort: 7000,
  forwards: [
    { host_port: 8080, guest_port: 80, proto: 'tcp' },
    { host_port: 5353, guest_port: 53, proto: 'udp' },
  ],
};

const opt = (args: string[], flag: string) => args.filter((_, i) => args[i - 1] === flag);

describe('adapters/hypervisor/qemu-args', () => {
  it("boots the image's kernel with its command line and no_timer_check (a TCG guest's timer check can hang it), once", () => {
    expect(opt(qemuArgs(base), '-append')).to.deep.equal(['console=ttyS0 no_timer_check']);
    expect(kernelCmdline('console=ttyS0 no_timer_check root=/dev/vda')).to.equal(
      'console=ttyS0 no_timer_check root=/dev/vda',
    );
    expect(kernelCmdline('no_timer_check_x=1')).to.equal('no_timer_check_x=1 no_timer_check');
    expect(kernelCmdline('')).to.equal('no_timer_check');
    // A disk that boots through the firmware has its bootloader's command line: nothing is appended.
    const firmware = qemuArgs({ ...base, image: { ...base.image, boot: 'firmware' } });
    expect(firmware).to.not.include('-append');
    expect(firmware).to.not.include('-kernel');
  });

  it("hands the NIC to svc-netd on a socket QEMU listens on, with the MAC saved guests know; forwards on loopback only with QEMU's own network", () => {
    expect(opt(qemuArgs(base), '-netdev')[0]).to.equal(
      'stream,id=net0,server=on,addr.type=unix,addr.path=/vm/net.sock',
    );
    // svc-netd's link takes 64 KB frames; QEMU's own network keeps Ethernet's 1500.
    expect(opt(qemuArgs(base), '-device')).to.include(
      'virtio-net-pci,netdev=net0,mac=52:54:00:12:34:56,host_mtu=65520',
    );
    expect(opt(qemuArgs({ ...base, nic: userNic }), '-device')).to.include(
      'virtio-net-pci,netdev=net0,mac=52:54:00:12:34:56',
    );
    expect(opt(qemuArgs({ ...base, nic: { kind: 'netd', socket: '/v,m/net.sock' } }), '-netdev')[0]).to.equal(
      'stream,id=net0,server=on,addr.type=unix,addr.path=/v,,m/net.sock',
    );
    expect(opt(qemuArgs({ ...base, nic: userNic }), '-netdev')[0]).to.equal(
      'user,id=net0,hostfwd=tcp:127.0.0.1:2222-:22,hostfwd=tcp:127.0.0.1:7000-:7475,hostfwd=tcp:127.0.0.1:8080-:80,hostfwd=udp:127.0.0.1:5353-:53',
    );
  });

  it('names the process for re-attach, picks the CPU model and the code buffer by accelerator', () => {
    const a = qemuArgs(base);
    expect(opt(a, '-name')[0]).to.equal('svc-web,process=svc-web');
    expect(opt(a, '-cpu')[0]).to.equal('max');
    expect(opt(a, '-accel')[0], 'a bounded buffer of translated code').to.equal('tcg,tb-size=256');
    expect(opt(qemuArgs({ ...base, accel: 'kvm' }), '-cpu')[0]).to.equal('host');
    expect(opt(qemuArgs({ ...base, accel: 'kvm' }), '-accel')[0]).to.equal('kvm');
    expect(a).not.to.include('-loadvm');
    expect(opt(qemuArgs({ ...base, loadSnapshot: 'svc-suspend' }), '-loadvm')).to.deep.equal(['svc-suspend']);
    expect(qemuArgs({ ...base, loadSnapshot: 'svc-suspend' }), 'held for the cont, as any restore').to.include('-S');
  });

  it('hands the disk over as inherited descriptors with its backing by full path, and restores from a stream on an fd', () => {
    expect(opt(qemuArgs(base), '-drive')[0]).to.equal(
      'file=/vm/disk.qcow2,if=virtio,format=qcow2,cache=writeback,discard=unmap,file.locking=off',
    );
    const a = qemuArgs({
      ...base,
      diskFds: { rw: 4, ro: 5, backing: '/vm,x/base-0123456789abcdef.qcow2' },
      incomingFd: 3,
    });
    expect(opt(a, '-add-fd')).to.deep.equal(['fd=4,set=1,opaque=/vm/disk.qcow2', 'fd=5,set=1']);
    expect(opt(a, '-drive')[0]).to.equal(
      'file=/dev/fdset/1,if=virtio,format=qcow2,cache=writeback,discard=unmap,file.locking=off,backing.file.filename=/vm,,x/base-0123456789abcdef.qcow2,backing.driver=qcow2',
    );
    expect(opt(a, '-incoming')).to.deep.equal(['fd:3']);
    // A loaded guest waits for the daemon's cont, even one saved running (a capture for forks).
    expect(a[a.indexOf('-incoming') - 1]).to.equal('-S');
    expect(qemuArgs(base)).not.to.include('-S');
    expect(a).not.to.include('-loadvm');
    expect(opt(qemuArgs({ ...base, diskFds: { rw: 4, ro: 5 } }), '-drive')[0]).to.equal(
      'file=/dev/fdset/1,if=virtio,format=qcow2,cache=writeback,discard=unmap,file.locking=off',
    );
  });

  it('maps a RAM image copy-on-write as pc.ram and defers the load; makes one with a shared mapping', () => {
    const restore = qemuArgs({
      ...base,
      incomingFd: 3,
      incomingDefer: true,
      ramFile: { path: '/vm,x/base-0123456789abcdef.ram', shared: false },
    });
    expect(opt(restore, '-object')).to.deep.equal([
      'memory-backend-file,id=pc.ram,size=512M,mem-path=/vm,,x/base-0123456789abcdef.ram,share=off',
    ]);
    expect(opt(restore, '-machine')).to.deep.equal(['pc', 'memory-backend=pc.ram']);
    expect(opt(restore, '-incoming')).to.deep.equal(['defer']);
    const make = qemuArgs({ ...base, incomingFd: 3, ramFile: { path: '/vm/state.ram.tmp', shared: true } });
    expect(opt(make, '-object')[0]).to.match(/mem-path=\/vm\/state\.ram\.tmp,share=on$/);
    expect(opt(make, '-incoming')).to.deep.equal(['fd:3']);
    expect(qemuArgs(base)).not.to.include('-object');
  });

  it('runs QEMU under seccomp, and its serial log appends so it can be capped', () => {
    const a = qemuArgs(base);
    expect(opt(a, '-sandbox')).to.deep.equal([
      'on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny',
    ]);
    expect(opt(a, '-chardev')).to.include('file,id=serial0,path=/vm/serial.log,append=on');
    expect(opt(a, '-serial')).to.deep.equal(['chardev:serial0']);
    expect(a).not.to.include('-runas');
    const dropped = qemuArgs({ ...base, runAs: 'nobody' });
    expect(opt(dropped, '-runas')).to.deep.equal(['nobody']);
    expect(opt(dropped, '-sandbox')).to.deep.equal([
      'on,obsolete=deny,elevateprivileges=allow,spawn=deny,resourcecontrol=deny',
    ]);
  });

  it('adds 9p shares, read-only where asked, and virtio-fs with shared memory', () => {
    const mounts = [
      { tag: 'src', host: '/home/u/src', readonly: false },
      { tag: 'ro', host: '/data', readonly: true },
    ];
    const p9 = qemuArgs({ ...base, mounts, mountDriver: '9p' });
    expect(opt(p9, '-fsdev')).to.deep.equal([
      'local,path=/home/u/src,security_model=none,id=fs0',
      'local,path=/data,security_model=none,id=fs1,readonly=on',
    ]);
    expect(opt(p9, '-device').filter((d) => d.startsWith('virtio-9p-pci'))).to.deep.equal([
      'virtio-9p-pci,id=share0,fsdev=fs0,mount_tag=src,addr=0x10',
      'virtio-9p-pci,id=share1,fsdev=fs1,mount_tag=ro,addr=0x11',
    ]);
    const v = qemuArgs({
      ...base,
      mountDriver: 'virtiofs',
      mounts: mounts.map((m, i) => ({ ...m, socket: `/vm/vfs${i}.sock` })),
    });
    expect(opt(v, '-object')).to.deep.equal(['memory-backend-memfd,id=mem,size=512M,share=on']);
    expect(opt(v, '-device')).to.include('vhost-user-fs-pci,chardev=vfs1,tag=ro');
    expect(opt(v, '-chardev')).to.include('socket,id=vfs0,path=/vm/vfs0.sock');
  });

  it("names a loaded guest's 9p shares as backends only, their devices added once it runs", () => {
    const mounts = [
      { tag: 'src', host: '/home/u/src', readonly: false },
      { tag: 'ro', host: '/data', readonly: true },
    ];
    for (const load of [{ incomingFd: 3 }, { loadSnapshot: 'svc-suspend' }]) {
      const a = qemuArgs({ ...base, mounts, mountDriver: '9p', ...load });
      expect(opt(a, '-device').filter((d) => d.startsWith('virtio-9p-pci'))).to.deep.equal([]);
      expect(opt(a, '-fsdev')).to.deep.equal([
        'local,path=/home/u/src,security_model=none,id=fs0',
        'local,path=/data,security_model=none,id=fs1,readonly=on',
      ]);
    }
    // The devices, by the tags the guest knows them by (mount0 for one without a tag).
    expect(
      sharesToAdd([
        { host: '/home/u/src', guest: '/src', tag: 'src' },
        { host: '/data', guest: '/data', readonly: true },
      ]),
    ).to.deep.equal([
      { driver: 'virtio-9p-pci', id: 'share0', fsdev: 'fs0', mount_tag: 'src', addr: '0x10' },
      { driver: 'virtio-9p-pci', id: 'share1', fsdev: 'fs1', mount_tag: 'mount1', addr: '0x11' },
    ]);
  });

  it('mounts shares added to a woken guest once each tag has its driver, as at boot', () => {
    const m = [
      { host: '/h', guest: "/mnt/a b'c", tag: 'data' },
      { host: '/r', guest: '/mnt/r', readonly: true },
    ];
    const script = addedMountScript(m);
    // Parsed by sh, never run here: this host is no guest.
    execFileSync('sh', ['-n', '-c', script]);
    const lines = script.split('\n');
    const wait = lines.findIndex((l) => l.startsWith('for t in data mount1; do'));
    expect(wait).to.be.greaterThan(0);
    expect(lines[wait + 1]).to.match(
      /until has "\$t"; .*\[ \$n -le 300 \] \|\| \{ echo "share \$t did not appear in the guest" >&2; exit 1; \}/,
    );
    // Each mounted as at boot, unless it still is.
    const boot = mountScript(m, '9p').trim().split('\n').slice(3);
    expect(lines.slice(wait + 3)).to.deep.equal([
      "if ! grep -q '^data ' /proc/mounts; then",
      `  ${boot[0]}`,
      `  ${boot[1]}`,
      'fi',
      "if ! grep -q '^mount1 ' /proc/mounts; then",
      `  ${boot[2]}`,
      `  ${boot[3]}`,
      'fi',
    ]);
    expect(lines[0]).to.equal('set -e');
  });

  it('adds the overlay NIC with a MAC derived from its address', () => {
    const a = qemuArgs({ ...base, overlay: { mcast: '230.0.74.1:47475', mac: overlayMac('10.77.0.12/24') } });
    expect(opt(a, '-netdev')[1]).to.equal('socket,id=overlay0,mcast=230.0.74.1:47475,localaddr=127.0.0.1');
    expect(opt(a, '-device')).to.include('virtio-net-pci,netdev=overlay0,mac=52:54:00:4f:00:0c');
  });

  it('never lets mount input inject QEMU options: commas and bad tags are refused at the API', () => {
    for (const m of [
      { host: '/a,readonly=off', guest: '/x' },
      { host: '/a', guest: '/x', tag: 't,id=evil' },
      { host: '/a', guest: '/x', tag: 'a=b' },
      { host: 'rel', guest: '/x' },
    ]) {
      expect(() => parseCreateRequest({ mounts: [m] })).to.throw(InvalidArgumentError);
    }
  });

  it('writes the seed: overlay address in meta-data, mounts as a boot script and as cloud-init mounts', () => {
    expect(
      metaData({ instanceId: 'i', hostname: 'h', authorizedKeys: ['ssh-ed25519 AAAA k'], overlayIp: '10.77.0.3/24' }),
    ).to.equal(
      'instance-id: i\nlocal-hostname: h\nsvc-overlay-ip: 10.77.0.3/24\npublic-keys:\n  - ssh-ed25519 AAAA k\n',
    );
    const m = [{ host: '/h', guest: '/mnt/h', readonly: true }];
    expect(mountScript(m, '9p')).to.contain(
      "mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,ro mount0 '/mnt/h'",
    );
    expect(mountScript(m, 'virtiofs')).to.contain("mount -t virtiofs -o ro mount0 '/mnt/h'");
    expect(cloudInitMounts(m, '9p')).to.equal(
      '#cloud-config\nmounts:\n  - [mount0, "/mnt/h", 9p, "trans=virtio,version=9p2000.L,ro,nofail", "0", "0"]\n',
    );
  });

  it('quotes a guest path as one shell word whatever it holds', () => {
    for (const p of ["/mnt/a'b", "/mnt/'; touch /tmp/pwned; '", '/mnt/$(id) `id` "x"']) {
      expect(execFileSync('sh', ['-c', `printf %s ${shellWord(p)}`], { encoding: 'utf8' })).to.equal(p);
    }
  });
});
