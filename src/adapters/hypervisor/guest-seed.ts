import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { InternalError } from '../../domain/errors.js';
import type { ProcessStart } from '../../domain/processes.js';
import type { VmSpec } from '../../ports/hypervisor.js';
import { cloudInitMounts, mountScript } from './guest-mounts.js';

const run = promisify(execFile);

export interface SeedData {
  instanceId: string;
  hostname: string;
  authorizedKeys: string[];
  userdata?: string;
  /** Shell script the project's image runs at boot to mount shares (`mounts.sh`). */
  mountsScript?: string;
  /** cloud-config for stock images (mounts), applied by cloud-init next to the user's user-data. */
  vendorData?: string;
  /** Overlay address with prefix, for the second NIC. */
  overlayIp?: string;
  /** What the agent of an image with svc's init starts at a cold boot (`entrypoint.json`). */
  entrypoint?: ProcessStart;
}

/**
 * A VM's seed: its instance id, host name and key, user-data, the shares (a mount script for the
 * project's images, cloud-config for cloud-init in imported disks, which also gets the daemon's
 * key for root), the overlay address and what its agent starts at boot.
 */
export function seedFor(spec: VmSpec, driver: '9p' | 'virtiofs'): SeedData {
  return {
    instanceId: `${spec.name}-${Date.now().toString(36)}`,
    hostname: spec.hostname,
    authorizedKeys: spec.ssh_authorized_key ? [spec.ssh_authorized_key] : [],
    userdata: spec.userdata,
    mountsScript: spec.mounts.length ? mountScript(spec.mounts, driver) : undefined,
    vendorData: `#cloud-config\ndisable_root: false\n${spec.mounts.length ? cloudInitMounts(spec.mounts, driver).replace('#cloud-config\n', '') : ''}`,
    overlayIp: spec.overlay_ip,
    entrypoint: spec.entrypoint,
  };
}

/** meta-data in the NoCloud format cloud-init reads (and the project's own init parses). */
export function metaData(s: SeedData): string {
  const keys = s.authorizedKeys.map((k) => `  - ${k.trim()}`).join('\n');
  const overlay = s.overlayIp ? `svc-overlay-ip: ${s.overlayIp}\n` : '';
  return `instance-id: ${s.instanceId}\nlocal-hostname: ${s.hostname}\n${overlay}${keys ? `public-keys:\n${keys}\n` : ''}`;
}

/**
 * Writes the VM's cloud-init NoCloud seed as an ISO 9660 image labelled `cidata`, so stock cloud
 * images and the project's own image read the same hostname, SSH key and userdata.
 */
export async function writeSeed(path: string, s: SeedData): Promise<void> {
  const dir = await mkdtemp(`${path}.d-`);
  try {
    await writeFile(join(dir, 'meta-data'), metaData(s));
    await writeFile(join(dir, 'user-data'), s.userdata ?? '#cloud-config\n{}\n');
    if (s.mountsScript) await writeFile(join(dir, 'mounts.sh'), s.mountsScript);
    if (s.vendorData) await writeFile(join(dir, 'vendor-data'), s.vendorData);
    if (s.entrypoint) await writeFile(join(dir, 'entrypoint.json'), JSON.stringify(s.entrypoint));
    if (s.overlayIp) {
      // Stock cloud images configure the overlay NIC from network-config (v2).
      await writeFile(
        join(dir, 'network-config'),
        `version: 2\nethernets:\n  primary:\n    match: {name: "e*0"}\n    dhcp4: true\n  overlay:\n    match: {macaddress: "${overlayMac(s.overlayIp)}"}\n    addresses: [${s.overlayIp}]\n`,
      );
    }
    await run('genisoimage', ['-quiet', '-output', path, '-volid', 'cidata', '-joliet', '-rock', dir]);
  } catch (err) {
    throw new InternalError(`cannot write the cloud-init seed: ${(err as Error).message}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The overlay NIC's MAC, derived from its address so it is stable and unique on the segment. */
export function overlayMac(ip: string): string {
  const [a, b] = ip.split('/')[0].split('.').slice(2).map(Number);
  return `52:54:00:4f:${a.toString(16).padStart(2, '0')}:${b.toString(16).padStart(2, '0')}`;
}
