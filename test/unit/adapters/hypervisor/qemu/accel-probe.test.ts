import { expect } from 'chai';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chooseAccel, kvmWorks, probeKernels } from '../../../../../src/adapters/hypervisor/qemu/accel-probe.js';

describe('the KVM probe', () => {
  let dir: string;
  let device: string;
  let kernel: string;
  /** A stand-in for qemu-system-x86_64: a shell script that behaves as the guest would. */
  const fakeQemu = (name: string, body: string) => {
    const p = join(dir, name);
    writeFileSync(p, `#!/bin/sh\n${body}\n`);
    chmodSync(p, 0o755);
    return p;
  };

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'svc-probe-test-'));
    device = join(dir, 'kvm');
    writeFileSync(device, '');
    kernel = join(dir, 'vmlinuz');
    writeFileSync(kernel, 'not really a kernel');
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('counts KVM as working only when the kernel it boots reaches its panic', async () => {
    const boots = fakeQemu(
      'boots',
      'echo "[    0.4] Kernel panic - not syncing: VFS: Unable to mount root fs"; exec sleep 30',
    );
    const started = Date.now();
    expect(await kvmWorks({ qemu: boots, kernels: [kernel], device, timeoutMs: 5000 })).to.equal(true);
    expect(Date.now() - started, 'answers as soon as the panic shows').to.be.below(4000);
    // Nested KVM that hangs before the kernel's first line: the probe times out.
    expect(
      await kvmWorks({ qemu: fakeQemu('hangs', 'exec sleep 30'), kernels: [kernel], device, timeoutMs: 300 }),
    ).to.equal(false);
    // A guest that resets (a triple fault under -no-reboot exits 0) without the panic is no proof.
    expect(
      await kvmWorks({ qemu: fakeQemu('resets', 'echo "early"; exit 0'), kernels: [kernel], device, timeoutMs: 5000 }),
    ).to.equal(false);
    // No KVM device: no probe at all.
    expect(await kvmWorks({ qemu: boots, kernels: [kernel], device: join(dir, 'none'), timeoutMs: 5000 })).to.equal(
      false,
    );
  });

  it('falls back to the boot sector when no kernel is readable', async () => {
    const exits3 = fakeQemu('exits3', 'exit 3');
    expect(await kvmWorks({ qemu: exits3, kernels: [join(dir, 'missing')], device, timeoutMs: 5000 })).to.equal(true);
    // The kernel probe's command line would not pass for the boot sector's exit status.
    expect(await kvmWorks({ qemu: exits3, kernels: [kernel], device, timeoutMs: 5000 })).to.equal(false);
  });

  it("boots the host's newest kernel first, then built images' kernels, never a half-built image's", () => {
    const boot = join(dir, 'boot');
    const images = join(dir, 'images');
    mkdirSync(boot);
    for (const n of ['vmlinuz-5.10.0-1-amd64', 'vmlinuz-6.1.0-56-amd64', 'config-6.1.0-56-amd64'])
      writeFileSync(join(boot, n), '');
    for (const n of ['minimal', '.build-debian-1', 'imported']) mkdirSync(join(images, n), { recursive: true });
    writeFileSync(join(images, 'minimal', 'vmlinux'), '');
    writeFileSync(join(images, '.build-debian-1', 'vmlinux'), '');
    expect(probeKernels(images, boot)).to.deep.equal([
      join(boot, 'vmlinuz-6.1.0-56-amd64'),
      join(boot, 'vmlinuz-5.10.0-1-amd64'),
      join(images, 'minimal', 'vmlinux'),
    ]);
  });

  it('keeps its answer for this boot and this QEMU, so the next daemon does not wait out a hang again', async () => {
    const cacheFile = join(dir, 'images', '.accel-probe.json');
    mkdirSync(join(dir, 'images'));
    const hangs = fakeQemu('hangs', 'exec sleep 30');
    expect(await chooseAccel('auto', { qemu: hangs, kernels: [kernel], device, timeoutMs: 300, cacheFile })).to.equal(
      'tcg',
    );
    const kept = JSON.parse(readFileSync(cacheFile, 'utf8')) as { accel: string };
    expect(kept.accel).to.equal('tcg');
    // The kept answer is used without probing: changed by hand, it comes back as changed.
    writeFileSync(cacheFile, JSON.stringify({ ...kept, accel: 'kvm' }));
    const started = Date.now();
    expect(await chooseAccel('auto', { qemu: hangs, kernels: [kernel], device, timeoutMs: 3000, cacheFile })).to.equal(
      'kvm',
    );
    expect(Date.now() - started).to.be.below(1000);
    // Another QEMU binary is probed afresh.
    const boots = fakeQemu('boots', 'echo "Kernel panic - not syncing"; exec sleep 30');
    expect(await chooseAccel('auto', { qemu: boots, kernels: [kernel], device, timeoutMs: 3000, cacheFile })).to.equal(
      'kvm',
    );
    expect(await chooseAccel('tcg', { qemu: boots, kernels: [kernel], device, cacheFile })).to.equal('tcg');
  });
});
