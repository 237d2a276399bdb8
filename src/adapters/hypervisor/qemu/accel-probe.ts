import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { childEnv } from '../../process-kit/child-env.js';

export type Accel = 'kvm' | 'tcg';

/** A boot sector that writes 1 to port 0xf4 (isa-debug-exit): QEMU exits with status 3. */
function bootSector(): Buffer {
  const b = Buffer.alloc(512);
  Buffer.from([0xb0, 0x01, 0xe6, 0xf4, 0xf4]).copy(b); // mov al,1; out 0xf4,al; hlt
  b[510] = 0x55;
  b[511] = 0xaa;
  return b;
}

/**
 * Does KVM really run a guest here? `/dev/kvm` can exist and still fail (nested KVM that hangs,
 * or a CPU model KVM rejects), so the probe boots a one-instruction guest with the same CPU model
 * real boots use, under a short timeout.
 */
export async function kvmWorks(qemu: string, timeoutMs = 5000): Promise<boolean> {
  if (!existsSync('/dev/kvm')) return false;
  const dir = mkdtempSync(join(tmpdir(), 'svc-kvm-probe-'));
  const img = join(dir, 'boot.img');
  writeFileSync(img, bootSector());
  try {
    return await new Promise<boolean>((resolve) => {
      const child = spawn(qemu, [
        '-accel', 'kvm', '-cpu', 'host', '-machine', 'pc', '-nodefaults', '-display', 'none', '-no-reboot',
        '-device', 'isa-debug-exit,iobase=0xf4,iosize=0x04', '-drive', `file=${img},format=raw,if=ide`,
      ], { stdio: 'ignore', env: childEnv() });
      const timer = setTimeout(() => { child.kill('SIGKILL'); resolve(false); }, timeoutMs);
      child.once('error', () => { clearTimeout(timer); resolve(false); });
      child.once('exit', (code) => { clearTimeout(timer); resolve(code === 3); });
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `accel` config: kvm or tcg as given; auto = KVM when the probe passes, else TCG. */
export async function chooseAccel(setting: 'auto' | 'kvm' | 'tcg', qemu: string): Promise<Accel> {
  if (setting !== 'auto') return setting;
  return (await kvmWorks(qemu)) ? 'kvm' : 'tcg';
}
