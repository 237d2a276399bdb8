import { mountTag, type Mount } from '../../domain/vm.js';
import { shellWord } from '../process-kit/shell-word.js';

/** How a guest mounts its shares, whatever hypervisor serves them: 9p or virtio-fs, by tag. */
export type MountDriver = '9p' | 'virtiofs';

/** The guest script (seed `mounts.sh`) that mounts each share at boot. */
export function mountScript(mounts: Mount[], driver: MountDriver): string {
  const lines = [
    '#!/bin/sh',
    '# svc mounts, run by the guest init at boot',
    driver === '9p' ? 'modprobe -q 9pnet_virtio; modprobe -q 9p' : 'modprobe -q virtiofs',
    ...mountLines(mounts, driver),
  ];
  return lines.join('\n') + '\n';
}

/** Each share's folder made and mounted (`first`: the index of the first of `mounts`). */
function mountLines(mounts: Mount[], driver: MountDriver, first = 0): string[] {
  return mounts.flatMap((m, j) => {
    const tag = mountTag(m, first + j);
    const ro = m.readonly ? ',ro' : '';
    const guest = shellWord(m.guest);
    return [
      `mkdir -p ${guest}`,
      driver === '9p'
        ? `mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144${ro} ${tag} ${guest}`
        : `mount -t virtiofs -o ${m.readonly ? 'ro' : 'rw'} ${tag} ${guest}`,
    ];
  });
}

/** How long a guest waits for a share added after it woke to show up (its ACPI hot-plug), in tenths of a second. */
const ADDED_SHARE_WAIT = 300;

/**
 * The guest script that mounts 9p shares added to a guest after it woke from a saved state (a
 * clone, a create from an image's snapshot): each tag is waited for until the hot-plugged device
 * has its driver (at most 30 s), then mounted as at boot. Exits non-zero naming a share that
 * never came, or the mount that failed.
 */
export function addedMountScript(mounts: Mount[]): string {
  const tags = mounts.map((m, i) => mountTag(m, i));
  return [
    'set -e',
    'modprobe -q 9pnet_virtio 2>/dev/null || true; modprobe -q 9p 2>/dev/null || true',
    'has() { for f in /sys/bus/virtio/drivers/9pnet_virtio/virtio*/mount_tag; do [ -r "$f" ] && [ "$(tr -d \'\\000\' < "$f")" = "$1" ] && return 0; done; return 1; }',
    `for t in ${tags.join(' ')}; do`,
    `  n=0; until has "$t"; do n=$((n+1)); [ $n -le ${ADDED_SHARE_WAIT} ] || { echo "share $t did not appear in the guest" >&2; exit 1; }; sleep 0.1; done`,
    'done',
    // One still mounted (a guest that let go of only some of them, then was not saved) is kept.
    ...mounts.flatMap((m, i) => {
      const [mkdir, mount] = mountLines([m], '9p', i);
      return [`if ! ${isMounted(mountTag(m, i))}; then`, `  ${mkdir}`, `  ${mount}`, 'fi'];
    }),
  ].join('\n');
}

/** The shell test for a share being mounted: a 9p mount's source in /proc/mounts is its tag. */
function isMounted(tag: string): string {
  return `grep -q '^${tag} ' /proc/mounts`;
}

/**
 * The guest script that lets go of a guest's 9p shares before it is saved: each unmounted, the
 * last first; one that does not unmount and is still mounted (a process holds a file or folder in
 * it) fails the script, naming it.
 */
export function releaseMountScript(mounts: Mount[]): string {
  const lines = ['sync'];
  for (const [i, m] of [...mounts.entries()].reverse()) {
    const guest = shellWord(m.guest);
    const tag = mountTag(m, i);
    lines.push(
      `umount ${guest} 2>/dev/null || ! ${isMounted(tag)} || { echo "${tag} at "${guest}" is in use" >&2; exit 1; }`,
    );
  }
  return lines.join('\n');
}

/** The same mounts as cloud-init `mounts` (vendor-data), so stock cloud images mount them too. */
export function cloudInitMounts(mounts: Mount[], driver: MountDriver): string {
  const entries = mounts.map((m, i) => {
    const opts =
      driver === '9p' ? `trans=virtio,version=9p2000.L${m.readonly ? ',ro' : ''}` : m.readonly ? 'ro' : 'defaults';
    return `  - [${mountTag(m, i)}, ${JSON.stringify(m.guest)}, ${driver}, "${opts},nofail", "0", "0"]`;
  });
  return `#cloud-config\nmounts:\n${entries.join('\n')}\n`;
}
