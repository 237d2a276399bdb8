import { spawn } from 'node:child_process';
import {
  accessSync,
  constants,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeFileAtomic } from '../../fs-kit/atomic-file.js';
import { childEnv } from '../../process-kit/child-env.js';

export type Accel = 'kvm' | 'tcg';

/** What the probe needs: the QEMU binary, kernels it may boot, and where to remember the answer. */
export interface ProbeOptions {
  qemu: string;
  /** Guest kernels to boot, the first readable one is used; none: the boot-sector probe. */
  kernels?: string[];
  /** Remembers the answer for this boot of the host, this QEMU and this /dev/kvm. */
  cacheFile?: string;
  timeoutMs?: number;
  /** The KVM device (tests point it elsewhere). */
  device?: string;
}

/** A boot sector that writes 1 to port 0xf4 (isa-debug-exit): QEMU exits with status 3. */
function bootSector(): Buffer {
  const b = Buffer.alloc(512);
  Buffer.from([0xb0, 0x01, 0xe6, 0xf4, 0xf4]).copy(b); // mov al,1; out 0xf4,al; hlt
  b[510] = 0x55;
  b[511] = 0xaa;
  return b;
}

/** KVM with the CPU model real boots use; the rest of the command line is the probe's. */
const KVM = ['-accel', 'kvm', '-cpu', 'host', '-machine', 'pc', '-nodefaults', '-display', 'none', '-no-reboot'];

/**
 * Runs QEMU until `done(output)` says yes (true), it exits or prints something else to the end
 * (false), or the timeout (false: a hung guest).
 */
function runProbe(
  qemu: string,
  args: string[],
  timeoutMs: number,
  done: (out: string, code: number | null) => boolean | undefined,
): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const child = spawn(qemu, args, { stdio: ['ignore', 'pipe', 'ignore'], env: childEnv() });
    let out = '';
    const finish = (ok: boolean) => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      resolve(ok);
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    child.stdout!.setEncoding('utf8').on('data', (s: string) => {
      out = (out + s).slice(-4096);
      if (done(out, null)) finish(true);
    });
    child.once('error', () => finish(false));
    child.once('exit', (code) => finish(done(out, code) === true));
  });
}

/**
 * Does KVM really run a guest here? `/dev/kvm` can exist and still fail: `-cpu host` can abort
 * at once (an MSR KVM rejects), and nested KVM can run a real-mode boot sector yet hang a Linux
 * kernel before its first line (seen on a Firecracker host). So the probe boots a real kernel
 * with no root filesystem, under a short timeout, and KVM counts only if the kernel gets as far
 * as its panic: 64-bit mode, interrupts, timers and the serial port all worked. Without a
 * readable kernel it falls back to the boot sector.
 */
export async function kvmWorks(o: ProbeOptions): Promise<boolean> {
  if (!existsSync(o.device ?? '/dev/kvm')) return false;
  const timeoutMs = o.timeoutMs ?? 5000;
  const kernel = (o.kernels ?? []).find(readable);
  if (kernel) {
    return runProbe(
      o.qemu,
      [
        ...KVM,
        '-m',
        '128',
        '-serial',
        'stdio',
        '-kernel',
        kernel,
        '-append',
        'console=ttyS0 loglevel=1 panic=-1 root=/dev/svc-probe-none',
      ],
      timeoutMs,
      (out) => out.includes('Kernel panic') || undefined,
    );
  }
  const dir = mkdtempSync(join(tmpdir(), 'svc-kvm-probe-'));
  const img = join(dir, 'boot.img');
  writeFileSync(img, bootSector());
  try {
    return await runProbe(
      o.qemu,
      [...KVM, '-device', 'isa-debug-exit,iobase=0xf4,iosize=0x04', '-drive', `file=${img},format=raw,if=ide`],
      timeoutMs,
      (_out, code) => code === 3,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function readable(p: string): boolean {
  try {
    accessSync(p, constants.R_OK);
    return true;
  } catch {
    return false;
  }
}

/** Kernels the probe may boot: the host's (newest first), then those of built images under `imagesDir`. */
export function probeKernels(imagesDir?: string, bootDir = '/boot'): string[] {
  const list = (dir: string) => {
    try {
      return readdirSync(dir);
    } catch {
      return [];
    }
  };
  const host = list(bootDir)
    .filter((n) => /^vmlinuz-/.test(n))
    .sort()
    .reverse()
    .map((n) => join(bootDir, n));
  const images = imagesDir
    ? list(imagesDir)
        .filter((n) => !n.startsWith('.'))
        .map((n) => join(imagesDir, n, 'vmlinux'))
        .filter((p) => existsSync(p))
    : [];
  return [...host, ...images];
}

/** What the answer depends on: this boot of the host, this QEMU binary, the KVM device. */
function cacheKey(qemu: string, device: string): string {
  const boot = (() => {
    try {
      return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    } catch {
      return '';
    }
  })();
  return JSON.stringify([boot, qemu, existsSync(device)]);
}

/**
 * `accel` config: kvm or tcg as given; auto = KVM when the probe passes, else TCG. The answer is
 * kept in `cacheFile` for the rest of this boot, so every daemon start (and test suite) on a host
 * whose KVM hangs does not wait out the timeout again.
 */
export async function chooseAccel(setting: 'auto' | 'kvm' | 'tcg', o: ProbeOptions): Promise<Accel> {
  if (setting !== 'auto') return setting;
  const key = cacheKey(o.qemu, o.device ?? '/dev/kvm');
  if (o.cacheFile) {
    try {
      const c = JSON.parse(readFileSync(o.cacheFile, 'utf8')) as { key?: string; accel?: string };
      if (c.key === key && (c.accel === 'kvm' || c.accel === 'tcg')) return c.accel;
    } catch {
      // no answer kept yet
    }
  }
  const accel: Accel = (await kvmWorks(o)) ? 'kvm' : 'tcg';
  if (o.cacheFile) await writeFileAtomic(o.cacheFile, `${JSON.stringify({ key, accel })}\n`).catch(() => undefined);
  return accel;
}
