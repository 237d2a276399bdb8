import { realpath, stat } from 'node:fs/promises';
import { InvalidArgumentError } from '../../domain/errors.js';
import { allowedDirs, realOrSelf as real, within, writtenWithin } from '../fs-kit/paths.js';
import type { Mount } from '../../domain/vm.js';
import type { MountRule } from '../../ports/hypervisor.js';

/**
 * Every hypervisor shares host folders the same way: each `host` must be an existing directory
 * that, with its links resolved, lies inside one of the rule's allowed folders, and neither is nor
 * holds nor lies inside a forbidden one (the data dir: keys and disks). Returns the mounts with
 * their real host paths, which is what gets shared, so a link swapped later cannot redirect them.
 */
export async function checkHostDirs(mounts: Mount[], rule: MountRule): Promise<Mount[]> {
  const allowed = await allowedDirs(rule.allowed);
  const forbidden = await Promise.all(rule.forbidden.map(real));
  const out: Mount[] = [];
  for (const [i, m] of mounts.entries()) {
    const where = `mounts[${i}].host`;
    const outside = (how: string) =>
      new InvalidArgumentError(
        `${where}: ${m.host} ${how} outside the folders that may be shared (mount_dirs: ${rule.allowed.join(', ') || 'none'}); add it to mount_dirs in the daemon's config`,
      );
    // The path as written first: whether a folder outside exists, and where a link leads, stays unsaid.
    if (!writtenWithin(m.host, allowed)) throw outside('is');
    const st = await stat(m.host).catch(() => undefined);
    if (!st?.isDirectory()) throw new InvalidArgumentError(`${where}: ${m.host} is not an existing directory`);
    const host = await realpath(m.host);
    if (host === '/') throw new InvalidArgumentError(`${where}: sharing / would give the guest the whole host`);
    if (!allowed.some((a) => within(host, a.real))) throw outside('is a link that leads');
    const bad = forbidden.find((f) => within(host, f) || within(f, host));
    if (bad)
      throw new InvalidArgumentError(
        `${where}: ${m.host} ${within(host, bad) ? 'is inside' : 'holds'} svc's data dir (keys and disks); share another folder`,
      );
    out.push({ ...m, host });
  }
  return out;
}
